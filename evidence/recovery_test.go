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
	// Where each refusal points: the file as a whole (record -1, offset
	// -1), the recovery record (record 5, offset 0), or its checkpoint
	// (record 6, at the second line's offset: cpAt, read from the file).
	const cpAt = -2
	for _, tc := range []struct {
		name        string
		edit        func(lines [][]byte) []byte
		dir         string // "" for a fresh recovered session
		want        string
		seq, offset int64
	}{
		{"signed by an untrusted key", nil, other, "recovery checkpoint signed by", 6, cpAt},
		{"one line only", func(l [][]byte) []byte { return l[0] }, "", "not one recovery record and one checkpoint", -1, -1},
		{"three lines", func(l [][]byte) []byte { return bytes.Join(append(l, l[1]), nil) }, "", "not one recovery record and one checkpoint", -1, -1},
		{"checkpoint torn", func(l [][]byte) []byte { return append(l[0], l[1][:len(l[1])/2]...) }, "", "not one recovery record and one checkpoint", -1, -1},
		{"not JSON", func(l [][]byte) []byte { return []byte("{not json\n{\"seq\":1}\n") }, "", "does not parse", -1, -1},
		{"another seq", func(l [][]byte) []byte {
			return bytes.Join([][]byte{bytes.Replace(l[0], []byte(`"seq":5`), []byte(`"seq":6`), 1), l[1]}, nil)
		}, "", "does not continue the chain after record 4", 5, 0},
		{"another previous hash", func(l [][]byte) []byte {
			return bytes.Join([][]byte{replacePrev(l[0]), l[1]}, nil)
		}, "", "does not continue the chain after record 4", 5, 0},
		{"record changed under its checkpoint", func(l [][]byte) []byte {
			return bytes.Join([][]byte{bytes.Replace(l[0], []byte("restarted"), []byte("restartet"), 1), l[1]}, nil)
		}, "", "recovery checkpoint does not follow the recovery record", 6, cpAt},
		{"checkpoint's signature changed", func(l [][]byte) []byte {
			return bytes.Join([][]byte{l[0], flipInSig(l[1])}, nil)
		}, "", "recovery checkpoint signature", 6, cpAt},
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
			found := anomaliesOf(rep, evidence.KindRecoveryInvalid)
			if rep.Status != evidence.StatusTampered || len(found) != 1 || !strings.Contains(found[0].Msg, tc.want) || hasKind(rep, evidence.KindRecovered, "") {
				t.Fatalf("status %s, recovery-invalid findings %v, want one saying %q and no recovered statement: %v", rep.Status, found, tc.want, rep.Anomalies)
			}
			offset := tc.offset
			if offset == cpAt {
				b, err := os.ReadFile(ptyFile(d, vocab.RecoveryFile))
				if err != nil {
					t.Fatal(err)
				}
				offset = int64(bytes.IndexByte(b, '\n') + 1)
			}
			if a := found[0]; a.File != vocab.RecoveryFile || a.Seq != tc.seq || a.Offset != offset {
				t.Errorf("the finding points at %s record %d offset %d, want %s record %d offset %d", a.File, a.Seq, a.Offset, vocab.RecoveryFile, tc.seq, offset)
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
