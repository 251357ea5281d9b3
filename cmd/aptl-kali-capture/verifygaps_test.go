package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestVerifyPrintsAuditWindows: a blind window of the audit witness is
// printed as a window, its refused restore said; an audit loss stays a
// count of records.
func TestVerifyPrintsAuditWindows(t *testing.T) {
	rep := &evidence.Report{Status: evidence.StatusOK, Gaps: []evidence.Gap{
		{Seq: 4, Reason: vocab.GapAuditLost, Stream: vocab.StreamAudit, Count: 12, First: "2026-12-01T08:00:00Z"},
		{Seq: 5, Reason: vocab.GapAuditRulesRemoved, Stream: vocab.StreamAudit, Count: 3, First: "2026-12-01T08:00:01Z", Last: "2026-12-01T08:00:02Z", Error: "re-add the rule of lab.rules:4: operation not permitted"},
		{Seq: 6, Reason: vocab.GapAuditDisabled, Stream: vocab.StreamAudit, Count: 7, First: "2026-12-01T08:00:03Z", Last: "2026-12-01T08:00:04Z"},
	}}
	var b bytes.Buffer
	printReport(&b, rep)
	for _, want := range []string{
		"gap: record 4, 12 audit records or events: audit-lost\n",
		"gap: record 5, the audit witness was blind from 2026-12-01T08:00:01Z to 2026-12-01T08:00:02Z, 3 rules out of effect: audit-rules-removed (still open then: re-add the rule of lab.rules:4: operation not permitted)\n",
		"gap: record 6, the audit witness was blind from 2026-12-01T08:00:03Z to 2026-12-01T08:00:04Z, 7 rules out of effect: audit-disabled\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}
