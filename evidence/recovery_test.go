package evidence_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// The recovery statement is trusted only as the chain's continuation,
// signed by a trusted key: each way a forger could write one of their own
// is refused by name (recovery-invalid), and the genuine one is reported.
func TestRecoveryStatementRefusals(t *testing.T) {
	signer := recordertest.Signer()
	recovered := func(t *testing.T) (dir string, lines [][]byte) {
		t.Helper()
		dir = recordertest.Unfinalized(t, t.TempDir(), "run-r", "sess-r", signer, nil, nil)
		if err := recordertest.Recover(dir, signer); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(ptyFile(dir, vocab.RecoveryFile))
		if err != nil {
			t.Fatal(err)
		}
		lines = bytes.SplitAfter(b, []byte("\n"))
		return dir, lines[:len(lines)-1] // each line with its newline
	}
	dir, _ := recovered(t)
	if rep := verify(dir, signer.PublicKey()); rep.Status != evidence.StatusUnfinalized || !hasKind(rep, evidence.KindRecovered, vocab.RecoveryFile) || hasKind(rep, evidence.KindRecoveryInvalid, "") {
		t.Fatalf("the genuine statement: %s %v", rep.Status, rep.Anomalies)
	}

	// Another key's recovery: a statement re-signed by someone else.
	other := recordertest.Unfinalized(t, t.TempDir(), "run-r", "sess-r", signer, nil, nil)
	if err := recordertest.Recover(other, testutil.NewSigner()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(lines [][]byte) []byte
		dir  string // "" for a fresh recovered session
		want string
	}{
		{"signed by an untrusted key", nil, other, "recovery checkpoint signed by"},
		{"one line only", func(l [][]byte) []byte { return l[0] }, "", "not one recovery record and one checkpoint"},
		{"three lines", func(l [][]byte) []byte { return bytes.Join(append(l, l[1]), nil) }, "", "not one recovery record and one checkpoint"},
		{"checkpoint torn", func(l [][]byte) []byte { return append(l[0], l[1][:len(l[1])/2]...) }, "", "not one recovery record and one checkpoint"},
		{"not JSON", func(l [][]byte) []byte { return []byte("{not json\n{\"seq\":1}\n") }, "", "does not parse"},
		{"another seq", func(l [][]byte) []byte {
			return bytes.Join([][]byte{bytes.Replace(l[0], []byte(`"seq":5`), []byte(`"seq":6`), 1), l[1]}, nil)
		}, "", "does not continue the chain after record 4"},
		{"another previous hash", func(l [][]byte) []byte {
			return bytes.Join([][]byte{replacePrev(l[0]), l[1]}, nil)
		}, "", "does not continue the chain after record 4"},
		{"record changed under its checkpoint", func(l [][]byte) []byte {
			return bytes.Join([][]byte{bytes.Replace(l[0], []byte("restarted"), []byte("restartet"), 1), l[1]}, nil)
		}, "", "recovery checkpoint does not follow the recovery record"},
		{"checkpoint's signature changed", func(l [][]byte) []byte {
			return bytes.Join([][]byte{l[0], flipInSig(l[1])}, nil)
		}, "", "recovery checkpoint signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dir
			if d == "" {
				var lines [][]byte
				d, lines = recovered(t)
				if err := os.WriteFile(ptyFile(d, vocab.RecoveryFile), tc.edit(lines), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rep := verify(d, signer.PublicKey())
			var msgs []string
			for _, a := range rep.Anomalies {
				if a.Kind == evidence.KindRecoveryInvalid {
					msgs = append(msgs, a.Msg)
				}
			}
			if rep.Status != evidence.StatusTampered || len(msgs) != 1 || !strings.Contains(msgs[0], tc.want) || hasKind(rep, evidence.KindRecovered, "") {
				t.Errorf("status %s, recovery-invalid findings %q, want one saying %q and no recovered statement: %v", rep.Status, msgs, tc.want, rep.Anomalies)
			}
		})
	}
}

// replacePrev changes a record line's previous hash to another valid one.
func replacePrev(line []byte) []byte {
	return toggleByte(line, bytes.Index(line, []byte(`"prev":"`))+len(`"prev":"`), '0', '1')
}

// flipInSig changes one base64 character inside a checkpoint's armored
// signature, past its header.
func flipInSig(line []byte) []byte {
	return toggleByte(line, bytes.Index(line, []byte("-----BEGIN SSH SIGNATURE-----"))+60, 'A', 'B')
}

// toggleByte returns a copy of line whose byte i is b where it was a, and
// a anywhere else: a change that stays within the field's alphabet.
func toggleByte(line []byte, i int, a, b byte) []byte {
	out := bytes.Clone(line)
	if out[i] == a {
		out[i] = b
	} else {
		out[i] = a
	}
	return out
}
