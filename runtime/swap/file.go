package swap

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ppgen/ppgen/runtime/internal/swapdir"
)

// fileMedium writes each offload to its own file in a directory it creates
// under the user's directory, and removes the file when the data is loaded
// back, and the directory on close. Each file carries a header naming the
// chunk and a checksum of its bytes (see header.go), verified on load.
//
// The directory is named ppgen-swap-PID-RANDOM and holds a lock file on
// which the medium keeps an exclusive flock(2) while it lives; a directory
// whose lock can be taken is stale, and newFileMedium removes the stale
// siblings of the one it creates (runtime/internal/swapdir: the names, the
// lock, the rule).
type fileMedium struct {
	parent string   // the directory the user gave
	dir    string   // ours, under parent
	lock   *os.File // dir/lock, flocked while the medium lives (nil where flock is missing)
	tier   [8]byte  // random: the files of another tier are told apart
}

// newFileMedium creates the medium's directory under parent and removes
// the stale directories of dead tiers beside it.
func newFileMedium(parent string) (*fileMedium, error) {
	if parent == "" {
		return nil, fmt.Errorf("swap: file tier: empty directory name")
	}
	fi, err := os.Stat(parent)
	if err != nil {
		return nil, fmt.Errorf("swap: file tier: directory %s: %w", parent, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("swap: file tier: %s is not a directory", parent)
	}
	tmp, err := os.MkdirTemp(parent, swapdir.NewPrefix)
	if err != nil {
		return nil, fmt.Errorf("swap: file tier: cannot create a directory under %s: %w", parent, err)
	}
	f := &fileMedium{parent: parent, dir: tmp}
	if _, err := rand.Read(f.tier[:]); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("swap: file tier: %w", err)
	}
	if f.lock, err = swapdir.Lock(tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("swap: file tier: lock %s: %w", tmp, err)
	}
	for try := 0; ; try++ {
		name := filepath.Join(parent, fmt.Sprintf("%s%d-%s", swapdir.Prefix, os.Getpid(), hex.EncodeToString(f.tier[:4])))
		if try > 0 {
			name = fmt.Sprintf("%s-%d", name, try)
		}
		err := os.Rename(tmp, name)
		if err == nil {
			f.dir = name
			break
		}
		if try == 10 {
			f.close()
			return nil, fmt.Errorf("swap: file tier: cannot name the directory %s: %w", name, err)
		}
	}
	register(f) // removed on a terminating signal too (signals.go)
	for _, dir := range swapdir.RemoveStale(parent, f.dir) {
		slog.Info("swap: removed the stale directory of a dead process", "dir", dir)
	}
	return f, nil
}

func (f *fileMedium) path(id uint64) string {
	return filepath.Join(f.dir, strconv.FormatUint(id, 10)+".bin")
}

// ioBuf is the buffer size for the tensors' bytes: small tensors are
// gathered into few writes, large ones go through directly.
const ioBuf = 256 << 10

func (f *fileMedium) header(id uint64, tag string, metas []meta) header {
	var total int64
	for _, m := range metas {
		total += m.bytes()
	}
	return header{order: nativeOrder, tier: f.tier, id: id, tag: keptTag(tag), metas: metas, payload: total}
}

func (f *fileMedium) put(id uint64, tag string, metas []meta, src [][]byte) (err error) {
	hb, err := encodeHeader(f.header(id, tag, metas))
	if err != nil {
		return err
	}
	p := f.path(id)
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err // *fs.PathError: names the path
	}
	defer func() {
		if cerr := fh.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			os.Remove(p)
		}
	}()
	w := bufio.NewWriterSize(fh, ioBuf)
	if _, err := w.Write(hb); err != nil {
		return err
	}
	var sum uint32
	for _, b := range src {
		sum = crc32.Update(sum, crcTable, b)
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, sum)); err != nil {
		return err
	}
	return w.Flush()
}

func (f *fileMedium) get(id uint64, tag string, metas []meta) (_ []any, err error) {
	p := f.path(id)
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() {
		fh.Close()
		if rerr := os.Remove(p); err == nil && rerr != nil {
			err = rerr
		}
	}()
	want := f.header(id, tag, metas)
	wantHB, err := encodeHeader(want)
	if err != nil {
		return nil, err
	}
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(fh, ioBuf)
	size := int64(len(wantHB)) + want.payload + trailerLen
	if fi.Size() < prefixLen {
		return nil, fmt.Errorf("%s holds %d bytes, want %d: too short for a swap file header (truncated?)", p, fi.Size(), size)
	}
	// Read only as much header as this chunk's own has: a corrupted
	// length cannot make Load allocate.
	hb := make([]byte, len(wantHB))
	if _, err := io.ReadFull(r, hb[:prefixLen]); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	n, err := headerLenOf(hb[:prefixLen])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if n != len(hb) {
		return nil, fmt.Errorf("%s: header of %d bytes, want %d for %s: the file of another chunk, or corrupted", p, n, len(hb), describe(want))
	}
	if _, err := io.ReadFull(r, hb[prefixLen:]); err != nil {
		return nil, fmt.Errorf("read %s: header: %w", p, err)
	}
	got, err := decodeHeader(hb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if err := sameChunk(got, want); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if fi.Size() != size {
		return nil, fmt.Errorf("%s holds %d bytes, want %d (truncated or appended to)", p, fi.Size(), size)
	}
	out := make([]any, len(metas))
	var sum uint32
	for i, m := range metas {
		b, view := alloc(m)
		if _, err := io.ReadFull(r, view); err != nil {
			return nil, fmt.Errorf("read %s: tensor %d (%d bytes): %w", p, i, len(view), err)
		}
		sum = crc32.Update(sum, crcTable, view)
		out[i] = b
	}
	var tr [trailerLen]byte
	if _, err := io.ReadFull(r, tr[:]); err != nil {
		return nil, fmt.Errorf("read %s: checksum: %w", p, err)
	}
	if fileSum := binary.LittleEndian.Uint32(tr[:]); fileSum != sum {
		return nil, fmt.Errorf("%s: data checksum mismatch: CRC-32 %08x, the file says %08x (the file was changed or corrupted)", p, sum, fileSum)
	}
	return out, nil
}

// describe names a header's chunk: "#3 (stage 0 forward #1)".
func describe(h header) string { return fmt.Sprintf("chunk #%d (%s)", h.id, h.tag) }

// sameChunk checks that a file's header is that of the chunk wanted.
func sameChunk(got, want header) error {
	switch {
	case got.tier != want.tier:
		return fmt.Errorf("written by another swap tier (%x, want %x): not this tier's file", got.tier, want.tier)
	case got.id != want.id || got.tag != want.tag:
		return fmt.Errorf("holds %s, want %s: the files of two chunks exchanged?", describe(got), describe(want))
	case got.order != want.order:
		return fmt.Errorf("byte order %d, this machine's is %d", got.order, want.order)
	case len(got.metas) != len(want.metas):
		return fmt.Errorf("%s: %d tensors, want %d", describe(got), len(got.metas), len(want.metas))
	}
	for i, m := range got.metas {
		w := want.metas[i]
		if m.dt != w.dt || !m.shape.Eq(w.shape) {
			return fmt.Errorf("%s: tensor %d is %v %v, want %v %v", describe(got), i, m.dt, m.shape, w.dt, w.shape)
		}
	}
	return nil
}

func (f *fileMedium) drop(id uint64) error {
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (f *fileMedium) close() error {
	err := os.RemoveAll(f.dir)
	if f.lock != nil {
		f.lock.Close() // after the removal: nobody may take the directory for stale while it is there
	}
	unregister(f) // after the removal: a signal meanwhile removes it too
	if err != nil {
		return fmt.Errorf("remove %s: %w", f.dir, err)
	}
	return nil
}

func (f *fileMedium) String() string { return "file tier under " + f.parent }
