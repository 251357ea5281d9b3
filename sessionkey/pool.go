package sessionkey

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// ErrPoolEmpty is matched (errors.Is) by Take's error when the pool holds
// no key it may use: the sidecar refuses the session, or signs it with its
// host key where a setting allows, and says so in the open record.
var ErrPoolEmpty = errors.New("sessionkey: the pool holds no usable key")

// maxLedger bounds the ledger read at Open: a line per serial ever taken,
// at most 21 bytes, so about 1.5 million sessions.
const maxLedger = 32 << 20

// Pool is the session keys on the sidecar's state volume.
type Pool struct {
	dir string // <state>/session-keys
	cmd SignerCommand
	now func() time.Time
	// OnRefuse, if set, is told of each key Take set aside (moved to
	// refused/) and why; it must not block.
	OnRefuse func(serial uint64, reason string)

	mu        sync.Mutex
	ledger    *os.File        // used-serials, appended to
	used      map[uint64]bool // every serial in the ledger
	handed    map[uint64]bool // the keys this process took or resumed
	pending   []uint64        // the pool's serials as last listed, lowest first
	spare     *Key            // a key ready for the next Take, its signer running
	readying  bool            // a spare is being readied; readyDone is closed when it is
	readyDone chan struct{}
	closed    bool
}

// Open loads the pool under stateDir/session-keys (made if missing, with
// its folders), reading the ledger of used serials. cmd starts a signer.
func Open(stateDir string, cmd SignerCommand) (*Pool, error) {
	dir := filepath.Join(stateDir, Dir)
	for _, d := range []string{dir, filepath.Join(dir, PoolDir), filepath.Join(dir, ActiveDir), filepath.Join(dir, RefusedDir)} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("sessionkey: %w", err)
		}
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("sessionkey: %s is not a folder", d)
		}
	}
	ledger, err := os.OpenFile(filepath.Join(dir, LedgerFile), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sessionkey: %w", err)
	}
	used, err := readLedger(ledger)
	if err != nil {
		ledger.Close()
		return nil, fmt.Errorf("sessionkey: %s: %w", LedgerFile, err)
	}
	return &Pool{dir: dir, cmd: cmd, now: time.Now, ledger: ledger, used: used, handed: map[uint64]bool{}}, nil
}

// readLedger reads every serial of the ledger; a torn last line (a crash
// mid-append) is not a serial, since the append is synced before the key
// is used.
func readLedger(f *os.File) (map[uint64]bool, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxLedger+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxLedger {
		return nil, fmt.Errorf("larger than %d bytes", maxLedger)
	}
	used := map[uint64]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		serial, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			if !bytes.HasSuffix(data, []byte("\n")) && n == bytes.Count(data, []byte("\n"))+1 {
				break // the torn last line
			}
			return nil, fmt.Errorf("line %d is not a serial", n)
		}
		used[serial] = true
	}
	return used, nil
}

// Close destroys the spare key, if one is ready, and releases the ledger.
// A spare being readied is destroyed when it is.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	// The key being readied is activated under mu, with the ledger: it
	// must not find the ledger closed.
	spare := p.takeSpare()
	p.mu.Unlock()
	var err error
	if spare != nil {
		err = spare.Destroy()
	}
	return errors.Join(err, p.ledger.Close())
}

// Available counts the keys in the pool folder, for readiness.
func (p *Pool) Available() (int, error) {
	serials, err := p.list()
	return len(serials), err
}

// list returns the serials of pool/'s key files, lowest first.
func (p *Pool) list() ([]uint64, error) {
	f, err := os.Open(filepath.Join(p.dir, PoolDir))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(2*MaxProvision + 16)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var serials []uint64
	for _, name := range names {
		if serial, ok := parseKeyName(name); ok {
			serials = append(serials, serial)
		}
	}
	slices.Sort(serials)
	return serials, nil
}

// Take gives the next session its key: the lowest serial in the pool
// whose certificate is usable now. The key leaves the pool for active/
// and its serial enters the ledger (synced) before its signer starts, so
// no crash can hand it to a second session. A key it may not use is set
// aside in refused/ (OnRefuse says why) and the next one tried; with none
// left, ErrPoolEmpty.
//
// A session's open should not wait for a signer child to start and the
// ledger to be synced (BenchmarkOpenSessionKey: that is most of the cost),
// so the pool keeps one key ready, its signer running: Take hands it over
// and readies the next in the background. A key readied and never handed
// over (the sidecar stopped) is in active/, and the next start destroys
// it (DestroyLeftovers): it cost a key, never a second use.
func (p *Pool) Take() (*Key, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("sessionkey: the pool is closed")
	}
	// The key being readied is this session's: waiting for it is no
	// longer than readying one, and the pool's last key is not missed for
	// being on its way.
	spare := p.takeSpare()
	p.mu.Unlock()
	if spare != nil {
		if err := p.stillUsable(spare); err == nil {
			p.ready()
			return spare, nil
		}
		spare.Destroy()
	}
	k, err := p.takeNew()
	if err == nil {
		// Only after a key was there: an empty pool is listed again at
		// the next Take, not polled.
		p.ready()
	}
	return k, err
}

// takeSpare waits for a key being readied, if no spare is ready yet, and
// takes the spare (nil if there is none). Callers hold mu; it releases
// it while waiting.
func (p *Pool) takeSpare() *Key {
	if p.spare == nil && p.readying {
		done := p.readyDone
		p.mu.Unlock()
		<-done
		p.mu.Lock()
	}
	spare := p.spare
	p.spare = nil
	return spare
}

// ready readies a spare key in the background, unless one is ready or
// being readied, or the pool is closed.
func (p *Pool) ready() {
	p.mu.Lock()
	if p.spare != nil || p.readying || p.closed {
		p.mu.Unlock()
		return
	}
	p.readying = true
	p.readyDone = make(chan struct{})
	p.mu.Unlock()
	go func() {
		k, err := p.takeNew()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.readying = false
		defer close(p.readyDone)
		if err != nil {
			return // Take tries again, and says why
		}
		if p.closed {
			k.Destroy()
			return
		}
		p.spare = k
	}()
}

// stillUsable checks that a spare's certificate is still valid now, and
// its signer still there.
func (p *Pool) stillUsable(k *Key) error {
	now := uint64(p.now().Unix())
	if now < k.cert.ValidAfter || (k.cert.ValidBefore != gossh.CertTimeInfinity && now >= k.cert.ValidBefore) {
		return errors.New("expired while ready")
	}
	select {
	case <-k.exited:
		return errors.New("its signer exited")
	default:
	}
	return nil
}

// takeNew takes the lowest usable key from the pool folder and starts its
// signer; the folder and the ledger are changed under mu, the signer
// started outside it.
func (p *Pool) takeNew() (*Key, error) {
	p.mu.Lock()
	serial, cert, err := p.activateNext()
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return p.start(serial, cert)
}

// activateNext finds the lowest usable key and activates it. Callers hold mu.
func (p *Pool) activateNext() (uint64, *gossh.Certificate, error) {
	for {
		if len(p.pending) == 0 {
			serials, err := p.list()
			if err != nil {
				return 0, nil, fmt.Errorf("sessionkey: list the pool: %w", err)
			}
			if len(serials) == 0 {
				return 0, nil, ErrPoolEmpty
			}
			p.pending = serials
		}
		serial := p.pending[0]
		p.pending = p.pending[1:]
		cert, err := p.usable(serial)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // taken meanwhile, or removed by the operator
		case errors.Is(err, errNotYet):
			continue // stays in the pool for a later Take
		case errors.Is(err, errUsedBefore):
			// A copy of a key that signed a session: kept anywhere, it
			// could re-sign that session. It is destroyed, not set aside.
			derr := p.destroyFiles(serial, filepath.Join(p.dir, PoolDir, keyName(serial)))
			p.told(serial, errors.Join(err, derr).Error()+"; destroyed")
			continue
		case err != nil:
			p.refuse(serial, PoolDir, err.Error())
			continue
		}
		if err := p.activate(serial); err != nil {
			return 0, nil, err
		}
		return serial, cert, nil
	}
}

// usable reads serial's certificate in the pool and checks it is one the
// sidecar may sign with now.
func (p *Pool) usable(serial uint64) (*gossh.Certificate, error) {
	if _, err := os.Lstat(filepath.Join(p.dir, PoolDir, keyName(serial))); err != nil {
		return nil, err
	}
	if p.used[serial] {
		return nil, fmt.Errorf("serial %d: %w (%s)", serial, errUsedBefore, LedgerFile)
	}
	cert, err := readCert(filepath.Join(p.dir, PoolDir, certName(serial)))
	if err != nil {
		return nil, err
	}
	if cert.Serial != serial {
		return nil, fmt.Errorf("the certificate's serial is %d, its file's name says %d", cert.Serial, serial)
	}
	if cert.CertType != gossh.UserCert || !slices.Contains(cert.ValidPrincipals, vocab.SignerPrincipal) {
		return nil, fmt.Errorf("the certificate is not a user certificate for %s", vocab.SignerPrincipal)
	}
	now := uint64(p.now().Unix())
	if now < cert.ValidAfter {
		return nil, fmt.Errorf("%w: the certificate is valid from %s", errNotYet, certTime(cert.ValidAfter))
	}
	if cert.ValidBefore != gossh.CertTimeInfinity && now >= cert.ValidBefore {
		return nil, fmt.Errorf("the certificate expired at %s", certTime(cert.ValidBefore))
	}
	return cert, nil
}

// errUsedBefore and errNotYet are two of usable's refusals: a serial in
// the ledger, and a certificate whose window has not begun (the key
// stays in the pool: a sidecar's clock behind the operator's does not
// burn it).
var (
	errUsedBefore = errors.New("used before")
	errNotYet     = errors.New("not valid yet")
)

func certTime(t uint64) string {
	if t == gossh.CertTimeInfinity {
		return "forever"
	}
	return time.Unix(int64(t), 0).UTC().Format(time.RFC3339)
}

// readCert reads a certificate file, bounded.
func readCert(path string) (*gossh.Certificate, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFrame))
	if err != nil {
		return nil, err
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey(data)
	if err != nil {
		return nil, fmt.Errorf("the certificate file: %w", err)
	}
	cert, ok := pub.(*gossh.Certificate)
	if !ok {
		return nil, errors.New("the certificate file holds a plain key, not a certificate")
	}
	return cert, nil
}

// activate moves serial's key and certificate to active/ and enters the
// serial in the ledger, synced.
func (p *Pool) activate(serial uint64) error {
	for _, name := range []string{keyName(serial), certName(serial)} {
		if err := os.Rename(filepath.Join(p.dir, PoolDir, name), filepath.Join(p.dir, ActiveDir, name)); err != nil {
			return fmt.Errorf("sessionkey: take key %d: %w", serial, err)
		}
	}
	if err := syncDir(filepath.Join(p.dir, ActiveDir)); err != nil {
		return fmt.Errorf("sessionkey: take key %d: %w", serial, err)
	}
	if _, err := p.ledger.WriteString(strconv.FormatUint(serial, 10) + "\n"); err != nil {
		return fmt.Errorf("sessionkey: take key %d: %s: %w", serial, LedgerFile, err)
	}
	if err := p.ledger.Sync(); err != nil {
		return fmt.Errorf("sessionkey: take key %d: %s: %w", serial, LedgerFile, err)
	}
	p.used[serial] = true
	p.handed[serial] = true
	return nil
}

// start starts serial's signer on its key file in active/.
func (p *Pool) start(serial uint64, cert *gossh.Certificate) (*Key, error) {
	file := filepath.Join(p.dir, ActiveDir, keyName(serial))
	f, err := os.OpenFile(file, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("sessionkey: key %d: %w", serial, err)
	}
	cmd, in, out, err := startSigner(p.cmd, f, cert)
	f.Close()
	if err != nil {
		// An active key is in the ledger: it signs nothing more. It is
		// destroyed, never set aside where it would stay a live key
		// (for a resumed one: the key of the session it would recover).
		derr := p.destroyFiles(serial, file)
		p.told(serial, errors.Join(err, derr).Error()+"; destroyed")
		return nil, fmt.Errorf("sessionkey: key %d: %w", serial, err)
	}
	k := &Key{cert: cert, serial: serial, file: file, dir: p, cmd: cmd, in: in, out: out, exited: make(chan struct{})}
	// One waiter for the child's whole life: a spare whose signer died
	// (killed, out of memory) is known to, and is never handed over.
	go func() {
		k.waitErr = cmd.Wait()
		close(k.exited)
	}()
	return k, nil
}

// Resume starts the signer of a key left in active/ by a sidecar that
// stopped before sealing its session, for the restart's recovery
// statement, which then destroys it.
func (p *Pool) Resume(serial uint64) (*Key, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cert, err := readCert(filepath.Join(p.dir, ActiveDir, certName(serial)))
	if err != nil {
		return nil, fmt.Errorf("sessionkey: resume key %d: %w", serial, err)
	}
	if cert.Serial != serial {
		return nil, fmt.Errorf("sessionkey: resume key %d: the certificate's serial is %d", serial, cert.Serial)
	}
	p.handed[serial] = true
	return p.start(serial, cert)
}

// DestroyLeftovers destroys every key in active/ that this process did
// not take or resume: one a stopped sidecar took for a session it never
// opened, or whose session it sealed without removing it. Run once the
// restart's recoveries have resumed theirs.
func (p *Pool) DestroyLeftovers() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.Open(filepath.Join(p.dir, ActiveDir))
	if err != nil {
		return 0, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return 0, err
	}
	var n int
	var errs []error
	for _, name := range names {
		serial, ok := parseKeyName(name)
		if !ok || p.handed[serial] {
			continue
		}
		if err := p.destroyFiles(serial, filepath.Join(p.dir, ActiveDir, name)); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// destroyFiles overwrites a key file with zeros, syncs it, and removes it
// and its certificate.
func (p *Pool) destroyFiles(serial uint64, file string) error {
	var errs []error
	if f, err := os.OpenFile(file, os.O_WRONLY|noFollow, 0); err == nil {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			_, werr := f.WriteAt(make([]byte, fi.Size()), 0)
			errs = append(errs, werr, f.Sync())
		}
		f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, path := range []string{file, filepath.Join(filepath.Dir(file), certName(serial))} {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, syncDir(filepath.Dir(file)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sessionkey: destroy key %d: %w", serial, err)
	}
	return nil
}

// refuse sets serial's files in from/ aside in refused/: a key never
// used, whose certificate the sidecar may not sign with (the operator's
// to look at, and a live key still: refused/ is as private as pool/).
func (p *Pool) refuse(serial uint64, from, reason string) {
	for _, name := range []string{keyName(serial), certName(serial)} {
		os.Rename(filepath.Join(p.dir, from, name), filepath.Join(p.dir, RefusedDir, name))
	}
	p.told(serial, reason)
}

// told tells OnRefuse of a key not used, and why.
func (p *Pool) told(serial uint64, reason string) {
	if p.OnRefuse != nil {
		p.OnRefuse(serial, reason)
	}
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
