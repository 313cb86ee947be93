package swap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// fileMedium writes each offload to its own file in a directory it creates
// under the user's directory, and removes the file when the data is loaded
// back, and the directory on close.
type fileMedium struct {
	parent string // the directory the user gave
	dir    string // ours, under parent
}

// newFileMedium creates the medium's directory under parent.
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
	dir, err := os.MkdirTemp(parent, "ppgen-swap-")
	if err != nil {
		return nil, fmt.Errorf("swap: file tier: cannot create a directory under %s: %w", parent, err)
	}
	return &fileMedium{parent: parent, dir: dir}, nil
}

func (f *fileMedium) path(id uint64) string {
	return filepath.Join(f.dir, strconv.FormatUint(id, 10)+".bin")
}

// ioBuf is the buffer size for the tensors' bytes: small tensors are
// gathered into few writes, large ones go through directly.
const ioBuf = 256 << 10

func (f *fileMedium) put(id uint64, metas []meta, src [][]byte) (err error) {
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
	for _, b := range src {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return w.Flush()
}

func (f *fileMedium) get(id uint64, metas []meta) (_ []any, err error) {
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
	var want int64
	for _, m := range metas {
		want += m.bytes()
	}
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != want {
		return nil, fmt.Errorf("%s holds %d bytes, want %d", p, fi.Size(), want)
	}
	r := bufio.NewReaderSize(fh, ioBuf)
	out := make([]any, len(metas))
	for i, m := range metas {
		b, view := alloc(m)
		if _, err := io.ReadFull(r, view); err != nil {
			return nil, fmt.Errorf("read %s: tensor %d (%d bytes): %w", p, i, len(view), err)
		}
		out[i] = b
	}
	return out, nil
}

func (f *fileMedium) drop(id uint64) error {
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (f *fileMedium) close() error {
	if err := os.RemoveAll(f.dir); err != nil {
		return fmt.Errorf("remove %s: %w", f.dir, err)
	}
	return nil
}

func (f *fileMedium) String() string { return "file tier under " + f.parent }
