// Package auditfmt reads the fields of a kernel audit record's text, as
// the kernel writes it ("audit(<sec>.<ms>:<serial>): name=value ..."): the
// one reader of that text, for the audit witness that writes the records
// and the verifier that reads them back.
package auditfmt

import "strings"

// Field returns the value of the first name=value field of a record's
// text, unquoted, and whether it is there. The first occurrence is the
// kernel's: free text a process supplies (a user message's msg='...', a
// command's arguments) comes after the kernel's own fields.
func Field(text, name string) (string, bool) {
	v, ok := RawField(text, name)
	return strings.Trim(v, `"`), ok
}

// RawField is Field's value as the kernel wrote it: quoted, or hex when
// the kernel encoded it.
func RawField(text, name string) (string, bool) {
	_, body, _ := strings.Cut(text, "): ")
	for body != "" {
		var tok string
		tok, body, _ = strings.Cut(body, " ")
		k, v, ok := strings.Cut(tok, "=")
		if ok && k == name {
			return v, true
		}
	}
	return "", false
}
