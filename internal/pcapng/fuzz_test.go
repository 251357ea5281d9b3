package pcapng

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzPcapngReader reads any bytes as a pcapng file. The reader never
// panics, never holds more than its bounds (one block buffer of at most
// MaxBlock, at most MaxInterfaces interfaces), never returns a packet
// longer than the snap length or than the file, ends cleanly only where
// the file ends, and says the same whatever size the reads of the file
// are; an error is an *Error naming an offset inside the file.
func FuzzPcapngReader(f *testing.F) {
	f.Add(writerFile(f))
	for _, c := range hostileFiles() {
		if len(c.file) < 1<<16 { // the 200,000 interfaces are 4 MB: the others hold its bound
			f.Add(c.file)
		}
	}
	f.Add(cat(shb(), idb(1, 8), epb(0, 1, make([]byte, 8), 9)))
	f.Fuzz(func(t *testing.T, file []byte) {
		n, err := read(t, bytes.NewReader(file), len(file))
		n1, err1 := read(t, iotest.OneByteReader(bytes.NewReader(file)), len(file))
		if n != n1 || errString(err) != errString(err1) {
			t.Fatalf("whole reads: %d packets, %v; one-byte reads: %d packets, %v", n, err, n1, err1)
		}
	})
}

// read reads a file of size bytes to its end or first error, checking
// the reader's bounds after every packet.
func read(t *testing.T, r io.Reader, size int) (int, error) {
	rd, err := NewReader(r, snap)
	if err != nil {
		checkError(t, err, size)
		return 0, err
	}
	for n := 0; ; n++ {
		p, err := rd.Next()
		if cap(rd.buf) > int(MaxBlock(snap)) || len(rd.ifaces) > MaxInterfaces {
			t.Fatalf("the reader holds a buffer of %d bytes and %d interfaces", cap(rd.buf), len(rd.ifaces))
		}
		if err == io.EOF {
			if rd.off != int64(size) {
				t.Fatalf("a clean end at offset %d of a %d-byte file", rd.off, size)
			}
			return n, nil
		}
		if err != nil {
			checkError(t, err, size)
			return n, err
		}
		if len(p.Data) > snap || len(p.Data) > size {
			t.Fatalf("a packet of %d bytes from a %d-byte file", len(p.Data), size)
		}
		if p.InterfaceID < 0 || p.InterfaceID >= len(rd.ifaces) || rd.ifaces[p.InterfaceID] != p.Interface {
			t.Fatalf("a packet of interface %d (%+v), which the section does not have", p.InterfaceID, p.Interface)
		}
	}
}

func checkError(t *testing.T, err error, size int) {
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not an *Error", err)
	}
	if pe.Offset < 0 || pe.Offset > int64(size) || pe.Offset == int64(size) && size > 0 {
		t.Fatalf("error at offset %d of a %d-byte file: %v", pe.Offset, size, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
