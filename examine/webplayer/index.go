package webplayer

import (
	"fmt"
	"html/template"
	"io"

	"github.com/aptl/aptl-kali-capture/examine"
)

// IndexEntry is one session's line on a run's index page.
type IndexEntry struct {
	// Page is the session page's file name, relative to the index.
	Page string
	// Summary is what the log says of the session (examine.Summarize).
	Summary examine.Summary
	// Verdict is the verifier's status, or "" when not verified.
	Verdict string
	// Error, when set, says why the session has no page.
	Error string
}

var indexTemplate = template.Must(template.New("index").Funcs(template.FuncMap{"shown": shown, "summary": summaryView}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="referrer" content="no-referrer">
<title>run {{shown .Run}}</title>
<style>body { font-family: sans-serif; margin: 1em; } td, th { padding: .2em .8em; text-align: left; } .error { color: #cf222e; }</style>
</head>
<body>
<h1>Sessions of run {{shown .Run}}</h1>
<p>{{if .Verified}}Verdicts are the verifier's, with the given key.{{else}}Not verified: exported without --key.{{end}}</p>
<table id="sessions">
<tr><th>session</th><th>user</th><th>start</th><th>end</th><th>exit code</th><th>close reason</th><th>verdict</th></tr>
{{- range .Entries}}{{$s := summary .Summary}}
<tr><td>{{if .Page}}<a href="{{.Page}}">{{shown $s.Session}}</a>{{else}}{{shown $s.Session}}{{end}}</td><td>{{shown $s.User}}</td><td>{{$s.Start}}</td><td>{{$s.End}}</td><td>{{$s.ExitCode}}</td><td>{{shown $s.CloseReason}}</td><td>{{if .Error}}<span class="error">no page: {{shown .Error}}</span>{{else if .Verdict}}{{shown .Verdict}}{{else}}not verified{{end}}</td></tr>
{{- end}}
</table>
</body>
</html>
`))

// WriteIndex writes the index page of a run's session pages.
func WriteIndex(w io.Writer, run string, verified bool, entries []IndexEntry) error {
	data := struct {
		Run      string
		Verified bool
		Entries  []IndexEntry
	}{run, verified, entries}
	if err := indexTemplate.Execute(w, data); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}
