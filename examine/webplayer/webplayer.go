// Package webplayer writes one session as a self-contained HTML page that
// plays it in a browser offline (`aptl-kali-capture export --format html`),
// and the index page of a run's pages. The page carries the session's
// typescript and timing files as they are, base64, and plays them with
// term.js (Debian's libjs-term.js, embedded, MIT); the timing is parsed in
// the page's own script, so no converted copy stands between the examiner
// and the record. Around the terminal: play/pause, speed, a seek bar with
// idle stretches, window changes and the log's gap records marked, a search
// over the output, the typed input in a pane of its own (only with
// Options.Input), a banner with the verifier's verdict and the session's
// metadata, and a timeline of bytes per second drawn in Go as inline SVG
// (there with JavaScript off).
//
// Every file of the session folder is hostile: metadata reaches the page
// only through html/template, the transcript only as base64 in a script
// string, and every size the page holds is bounded (the Max* constants).
package webplayer

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

const (
	// MaxTypescriptBytes bounds the typescript a page carries. A browser
	// holds it several times over while the page loads (the base64 text,
	// 4/3 of it; the bytes; the decoded output as UTF-16, up to twice
	// again; term.js's buffer), about 5 times in all: 64 MiB keeps a tab
	// near a third of a GiB. A longer session is refused, naming its size;
	// `play` and the asciicast export have no such bound.
	MaxTypescriptBytes = 64 << 20
	// MaxTimingBytes bounds the timing file a page carries: 16 MiB is
	// about half a million entries, far more than a 64 MiB typescript
	// written in reads of a few hundred bytes needs.
	MaxTimingBytes = 16 << 20
	// MaxGapMarks bounds the gap records marked on the seek bar and listed
	// in the banner; the rest are counted. A forged log could hold
	// millions, and each is an element of the page.
	MaxGapMarks = 1000
	// MaxAnomaliesShown bounds the verifier's anomalies listed in the
	// banner; the rest are counted (`verify` lists them all).
	MaxAnomaliesShown = 50
	// MaxTimelineBars bounds the timeline's columns: a session longer than
	// that many seconds is drawn with each column spanning several seconds,
	// so a week-long session is not half a million SVG elements.
	MaxTimelineBars = 1800
	// maxShownValue bounds one metadata string in the banner (a user
	// name, a reason); longer ones are cut, marked with an ellipsis.
	maxShownValue = 512
)

// Options are the choices of a page.
type Options struct {
	// Input includes the typed input: its bytes in the embedded typescript
	// and its pane. Off by default, as for the asciicast export
	// (examine.CastOptions): the input stream holds every byte typed,
	// unechoed passwords included. Without it each input entry's bytes are
	// overwritten with zero bytes in the page's copy of the typescript, in
	// place, so the timing still describes that copy byte for byte.
	Input bool
	// Keys, when set, are the trusted sidecar keys the session is verified
	// with; the banner shows the verdict. Without them the banner says
	// plainly that the session was not verified.
	Keys *evidence.Keys
}

//go:embed term.min.js
var termJS template.JS

//go:embed LICENSE.term.js
var termJSLicense string

//go:embed player.js
var playerJS template.JS

//go:embed page.html.tmpl
var pageTemplateText string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"shown": shown}).Parse(pageTemplateText))

// ErrTooLarge is wrapped by the refusal of a file past its bound.
var ErrTooLarge = errors.New("too large for a web page")

// PageInfo is what a page said of its session, for a run's index.
type PageInfo struct {
	Summary examine.Summary
	Verdict string // the verifier's status; "" when not verified
}

// WritePage writes the page of the session in dir to w. Nothing is written
// when the session cannot be read: the timing must parse (the one parser,
// scriptfmt), the typescript hold what it accounts for, both within their
// bounds; the error names the file and what is wrong.
func WritePage(w io.Writer, dir string, opts Options) (PageInfo, error) {
	tm, err := readBounded(dir, vocab.TimingFile, MaxTimingBytes)
	if err != nil {
		return PageInfo{}, err
	}
	ts, err := readBounded(dir, vocab.TypescriptFile, MaxTypescriptBytes)
	if err != nil {
		return PageInfo{}, err
	}
	rec, err := scanRecord(dir, ts, tm)
	if err != nil {
		return PageInfo{}, err
	}
	fileSum := sha256.Sum256(ts)
	embedded := ts
	if !opts.Input && len(rec.inputRanges) > 0 {
		embedded = bytes.Clone(ts)
		for _, r := range rec.inputRanges {
			clear(embedded[r.off : r.off+r.n])
		}
	}
	embeddedSum := sha256.Sum256(embedded)
	info := PageInfo{Summary: examine.Summarize(dir, "", "")}
	p := page{
		Summary:        summaryView(info.Summary),
		Verdict:        verdictOf(dir, opts.Keys),
		InputIncluded:  opts.Input,
		InputBytes:     rec.inputBytes,
		TypescriptSHA:  hex.EncodeToString(fileSum[:]),
		EmbeddedSHA:    hex.EncodeToString(embeddedSum[:]),
		Timeline:       rec.timeline(),
		Gaps:           rec.gaps,
		GapsLeftOff:    rec.gapsLeftOff,
		TermJSLicense:  termJSLicense,
		TypescriptSize: int64(len(ts)),
	}
	dataJS, err := dataScript(playerData{Input: opts.Input, Gaps: rec.gapMarks()}, embedded, tm)
	if err != nil {
		return info, err
	}
	p.Scripts = []template.JS{termJS, dataJS, playerJS}
	p.CSP = contentPolicy(p.Scripts)
	p.Witnesses = witnessesOf(p.Verdict.report, rec.openAttrs)
	info.Verdict = p.Verdict.Status
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := pageTemplate.ExecuteTemplate(bw, "page", p); err != nil {
		return info, err
	}
	if err := bw.Flush(); err != nil {
		return info, err
	}
	return info, nil
}

// dataScript is the script that hands the record to the player: the
// player's data as JSON (encoding/json escapes <, >, &, U+2028 and U+2029,
// so no string from the record can end the script element or the
// statement), and the two files as base64 string literals. The base64
// alphabet (A-Z a-z 0-9 + / =) holds no quote, backslash or '<', so those
// go in as they are, without html/template's escaping of '+' as \u002b,
// which would add a twelfth to the page.
func dataScript(d playerData, ts, tm []byte) (template.JS, error) {
	j, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(base64.StdEncoding.EncodedLen(len(ts)) + base64.StdEncoding.EncodedLen(len(tm)) + len(j) + 128)
	b.WriteString("window.APTL_PLAYER = ")
	b.Write(j)
	b.WriteString(";\nwindow.APTL_TYPESCRIPT_B64 = \"")
	b.WriteString(base64.StdEncoding.EncodeToString(ts))
	b.WriteString("\";\nwindow.APTL_TIMING_B64 = \"")
	b.WriteString(base64.StdEncoding.EncodeToString(tm))
	b.WriteString("\";\n")
	return template.JS(b.String()), nil
}

// contentPolicy is the page's Content-Security-Policy: nothing may be
// loaded or connected to, and only the page's own scripts run, each named
// by its SHA-256, so markup that a bug let through (an onerror= handler,
// a script element) would not run.
func contentPolicy(scripts []template.JS) string {
	csp := "default-src 'none'; style-src 'unsafe-inline'; script-src"
	for _, s := range scripts {
		sum := sha256.Sum256([]byte(s))
		csp += " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return csp
}

// readBounded reads one file of the session's pty folder whole, as the
// verifier opens it (a regular file, no link followed), refusing one past
// limit.
func readBounded(dir, name string, limit int64) ([]byte, error) {
	rel := vocab.PTYDir + "/" + name
	f, size, err := safefs.OpenRegular(dir, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a page carries: %w (play it with `play`, or export it as asciicast)", rel, size, limit, ErrTooLarge)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return b, nil
}

// byteRange is a span of the typescript.
type byteRange struct{ off, n int64 }

// recordScan is what the page needs from the timing and the log.
type recordScan struct {
	duration    time.Duration
	entries     []timedEntry // I and O entries, for the timeline
	inputRanges []byteRange  // where the input's bytes lie in the typescript
	inputBytes  int64
	gaps        []gapView
	gapsLeftOff int
	openAttrs   map[string]string
}

// timedEntry is one data entry at its time since the start.
type timedEntry struct {
	at    time.Duration
	input bool
	n     int64
}

// scanRecord checks the timing with the one parser of the format and the
// typescript against it, as the asciicast export does, and reads the log's
// gap records.
func scanRecord(dir string, ts, tm []byte) (*recordScan, error) {
	tmPath := vocab.PTYDir + "/" + vocab.TimingFile
	tsPath := vocab.PTYDir + "/" + vocab.TypescriptFile
	start, err := scriptfmt.ReadStartLine(bufio.NewReader(bytes.NewReader(ts)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tsPath, err)
	}
	rec := &recordScan{}
	off := start
	err = scriptfmt.Scan(bytes.NewReader(tm), tmPath, func(e scriptfmt.Entry) error {
		if rec.duration += e.Delay; rec.duration > scriptfmt.MaxDelaySeconds*time.Second {
			return fmt.Errorf("the recording lasts more than %d seconds", int64(scriptfmt.MaxDelaySeconds))
		}
		if e.Kind != 'I' && e.Kind != 'O' {
			return nil
		}
		if e.N > int64(len(ts))-off {
			return fmt.Errorf("the entry's %d bytes run past the typescript's end (%d bytes, this entry starts at %d)", e.N, len(ts), off)
		}
		rec.entries = append(rec.entries, timedEntry{at: rec.duration, input: e.Kind == 'I', n: e.N})
		if e.Kind == 'I' {
			rec.inputRanges = append(rec.inputRanges, byteRange{off, e.N})
			rec.inputBytes += e.N
		}
		off += e.N
		return nil
	})
	if err != nil {
		return nil, err
	}
	rec.readLog(dir)
	return rec, nil
}

// readLog collects the log's gap records, each at its time since the open
// record, and the open record's attributes. It verifies nothing (the
// verdict is Verify's); a log that cannot be read leaves no marks and is
// no reason to refuse the page, whose banner carries the verdict.
func (rec *recordScan) readLog(dir string) {
	var open *integrity.Record
	// The error is dropped on purpose: what was read before it is marked,
	// and the verdict (or "not verified") is what speaks for the log.
	_ = evidence.ReadRecords(dir, vocab.LogFile, func(i int, text []byte, complete bool) bool {
		if !complete {
			return false
		}
		var r integrity.Record
		if json.Unmarshal(text, &r) != nil {
			return false
		}
		if i == 0 {
			open = &r
			rec.openAttrs = r.Attrs
		}
		if r.Type != vocab.TypeGap || open == nil {
			return true
		}
		if len(rec.gaps) == MaxGapMarks {
			rec.gapsLeftOff++
			return true
		}
		g := gapView{Seq: r.Seq, Reason: r.Attrs[vocab.AttrReason], At: max(r.Time.Sub(open.Time), 0)}
		if r.Data != nil {
			g.Stream, g.Len = r.Data.Stream, r.Data.Len
		} else {
			g.Stream = r.Attrs[vocab.AttrStream]
		}
		rec.gaps = append(rec.gaps, g)
		return true
	})
}

// gapView is one gap record as the page shows it.
type gapView struct {
	Seq    uint64
	Reason string
	Stream string
	Len    int64
	At     time.Duration // since the open record, by the log's clock
}

// Seconds is the gap's time as the seek bar places it.
func (g gapView) Seconds() string { return fmt.Sprintf("%.3f", g.At.Seconds()) }

// gapMark is a gap for the page's script.
type gapMark struct {
	T     float64 `json:"t"`
	Label string  `json:"label"`
}

func (rec *recordScan) gapMarks() []gapMark {
	marks := make([]gapMark, 0, len(rec.gaps))
	for _, g := range rec.gaps {
		marks = append(marks, gapMark{T: g.At.Seconds(), Label: shown(fmt.Sprintf("gap record %d: %s, %s, %d bytes", g.Seq, g.Reason, g.Stream, g.Len))})
	}
	return marks
}

// playerData is what the page's script reads besides the two files.
type playerData struct {
	Input bool      `json:"input"`
	Gaps  []gapMark `json:"gaps"`
}

// page is the template's data.
type page struct {
	Summary        summary
	Verdict        verdict
	Witnesses      []string
	InputIncluded  bool
	InputBytes     int64
	TypescriptSize int64
	TypescriptSHA  string
	EmbeddedSHA    string
	Timeline       timeline
	Gaps           []gapView
	GapsLeftOff    int
	TermJSLicense  string
	// Scripts are the page's script elements' contents, in order: term.js,
	// the record, the player. CSP allows those exactly.
	Scripts []template.JS
	CSP     string
}

// summary is the banner's metadata, from the log, unverified.
type summary struct {
	Run, Session, User, State, CloseReason, Signal, Error string
	Start, End                                            string
	ExitCode                                              string
	BytesIn, BytesOut                                     int64
}

func summaryView(s examine.Summary) summary {
	v := summary{Run: s.Run, Session: s.Session, User: s.User, State: s.State, CloseReason: s.CloseReason,
		Signal: s.Signal, Error: s.Error, BytesIn: s.BytesIn, BytesOut: s.BytesOut, ExitCode: "none recorded"}
	if s.Start != nil {
		v.Start = s.Start.UTC().Format(time.RFC3339Nano)
		v.End = s.Start.Add(time.Duration(s.Seconds * float64(time.Second))).UTC().Format(time.RFC3339Nano)
	}
	if s.ExitCode != nil {
		v.ExitCode = fmt.Sprint(*s.ExitCode)
	}
	return v
}

// verdict is the banner's verification line.
type verdict struct {
	Verified         bool
	Status           string
	OK               bool
	Anomalies        []string
	AnomaliesLeftOff int
	GapCount         int
	report           *evidence.Report
}

func verdictOf(dir string, keys *evidence.Keys) verdict {
	if keys == nil {
		return verdict{}
	}
	rep := evidence.Verify(dir, *keys, evidence.Options{})
	v := verdict{Verified: true, Status: string(rep.Status), OK: rep.OK(), GapCount: len(rep.Gaps), report: rep}
	for i, a := range rep.Anomalies {
		if i == MaxAnomaliesShown {
			v.AnomaliesLeftOff = len(rep.Anomalies) - i
			break
		}
		v.Anomalies = append(v.Anomalies, a.String())
	}
	return v
}

// witnessesOf says what the witnesses recorded: the verifier's account
// when there is one, else the open record's states, unverified.
func witnessesOf(rep *evidence.Report, open map[string]string) []string {
	var out []string
	if rep != nil {
		if p := rep.Pcap; p != nil {
			out = append(out, fmt.Sprintf("packets: %s, %d files, %d packets (verified) %s", p.State, p.Files, p.Packets, p.Reason))
		}
		if a := rep.Audit; a != nil {
			out = append(out, fmt.Sprintf("audit: %s, %d files, %d records (verified) %s", a.State, a.Files, a.Records, a.Reason))
		}
		if len(out) == 0 {
			out = append(out, "none: the session's record names no witness")
		}
		return out
	}
	for _, w := range []struct{ name, state, reason string }{
		{"packets", vocab.AttrPcap, vocab.AttrPcapReason},
		{"audit", vocab.AttrAudit, vocab.AttrAuditReason},
	} {
		if st := open[w.state]; st != "" {
			out = append(out, strings.TrimSpace(fmt.Sprintf("%s: %s (as the open record says, not verified) %s", w.name, st, open[w.reason])))
		}
	}
	if len(out) == 0 {
		out = append(out, "none named in the open record")
	}
	return out
}

// shown bounds a hostile string for display; html/template escapes it.
func shown(s string) string {
	if len(s) <= maxShownValue {
		return s
	}
	cut := maxShownValue
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
