package witnessfs

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/recorder"
)

var testNames = SourceNames{Class: "probe", State: "probe", Reason: "probe_reason", On: "on", Unavailable: "unavailable", Disabled: "disabled"}

// testEngine stands for a class's engine; the witness it makes records
// what it was given.
type testEngine struct{ name string }

type testWitness struct {
	recorder.Witness // nil: the source never calls it
	eng              *testEngine
	dir              *os.File
}

func newTestSource(log *slog.Logger) *Source[testEngine] {
	return NewSource(testNames, log, "not started", func(eng *testEngine, dir *os.File, _ recorder.WitnessOpen) recorder.Witness {
		return &testWitness{eng: eng, dir: dir}
	})
}

// TestSourceStates: a source says why it is unavailable until it has an
// engine, opens a witness of that engine in the folder mkdir made while it
// has one, and says the new reason once the engine is taken away.
func TestSourceStates(t *testing.T) {
	src := newTestSource(slog.New(slog.DiscardHandler))
	if src.Class() != "probe" {
		t.Errorf("Class() = %q, want probe", src.Class())
	}
	mkdir := func() (*os.File, error) { return os.Open(t.TempDir()) }

	w, attrs := src.Open(recorder.WitnessOpen{Mkdir: mkdir, Notify: func() {}})
	if w != nil || !maps.Equal(attrs, map[string]string{"probe": "unavailable", "probe_reason": "not started"}) {
		t.Errorf("before SetEngine: witness %v, attributes %v", w, attrs)
	}

	eng := &testEngine{name: "one"}
	src.SetEngine(eng, "ignored with an engine")
	w, attrs = src.Open(recorder.WitnessOpen{Mkdir: mkdir, Notify: func() {}})
	tw, ok := w.(*testWitness)
	if !ok || tw.eng != eng || tw.dir == nil || !maps.Equal(attrs, map[string]string{"probe": "on"}) {
		t.Fatalf("with an engine: witness %#v, attributes %v", w, attrs)
	}
	tw.dir.Close()

	src.SetEngine(nil, "engine stopped")
	w, attrs = src.Open(recorder.WitnessOpen{Mkdir: mkdir, Notify: func() {}})
	if w != nil || !maps.Equal(attrs, map[string]string{"probe": "unavailable", "probe_reason": "engine stopped"}) {
		t.Errorf("after the engine stopped: witness %v, attributes %v", w, attrs)
	}
}

// TestSourceDisabled: a disabled source makes no session's witness and
// makes no folder; each open record says it is disabled and why, and an
// engine set later does not turn it on.
func TestSourceDisabled(t *testing.T) {
	src := newTestSource(slog.New(slog.DiscardHandler))
	src.Disable("not here")
	src.SetEngine(&testEngine{}, "")
	mkdir := func() (*os.File, error) {
		t.Error("a disabled source made the class's folder")
		return os.Open(t.TempDir())
	}
	w, attrs := src.Open(recorder.WitnessOpen{Mkdir: mkdir, Notify: func() {}})
	if w != nil || !maps.Equal(attrs, map[string]string{"probe": "disabled", "probe_reason": "not here"}) {
		t.Errorf("disabled: witness %v, attributes %v", w, attrs)
	}
}

// TestSourceFolderFailure: a session whose class folder cannot be made is
// recorded without the witness; the open record and a warning say why.
func TestSourceFolderFailure(t *testing.T) {
	var logs bytes.Buffer
	src := newTestSource(slog.New(slog.NewTextHandler(&logs, nil)))
	src.SetEngine(&testEngine{}, "")
	w, attrs := src.Open(recorder.WitnessOpen{Mkdir: func() (*os.File, error) { return nil, errors.New("no room") }, Notify: func() {}})
	if w != nil || !maps.Equal(attrs, map[string]string{"probe": "unavailable", "probe_reason": "no room"}) {
		t.Errorf("witness %v, attributes %v", w, attrs)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="probe: session folder" err="no room"`) {
		t.Errorf("log %q, want the class's warning with the error", logs.String())
	}
}
