package swap_test

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/internal/doctable"
	"github.com/ppgen/ppgen/runtime/swap"
)

var update = flag.Bool("update", false, "rewrite the swap table of docs/trust.md with the measured figures")

// offloaded returns a file tier under a new directory with the chunks of
// tags offloaded (one float64 tensor of shape 4x8 each, values distinct per
// chunk) and their copies done, and the path of each chunk's file.
func offloaded(t *testing.T, tags ...string) (*swap.Tier, []*swap.Handle, []string) {
	t.Helper()
	tier, err := swap.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	var hs []*swap.Handle
	var paths []string
	for i, tag := range tags {
		v := make([]float64, 32)
		for k := range v {
			v[k] = float64(100*i + k)
		}
		h, err := tier.Offload([]*tensor.Dense{tensor.New(tensor.WithShape(4, 8), tensor.WithBacking(v))}, tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := tier.Wait(h); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		paths = append(paths, filepath.Join(tier.Dir(), fmt.Sprintf("%d.bin", i+1)))
	}
	if got := chunkFiles(t, tier.Dir()); len(got) != len(tags) {
		t.Fatalf("chunk files %v, want %d", got, len(tags))
	}
	return tier, hs, paths
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if off < 0 {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		off += fi.Size()
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// badSwapCase damages a tier's files and loads; the load must fail with an
// error holding every want, and no data may come back.
type badSwapCase struct {
	name string
	run  func(t *testing.T) (result string, err error)
	want []string
}

// loadFails offloads chunks "stage 0 forward #1" and "#2", lets damage
// change the files, then loads the first chunk.
func loadFails(damage func(t *testing.T, tier *swap.Tier, paths []string)) func(t *testing.T) (string, error) {
	return func(t *testing.T) (string, error) {
		tier, hs, paths := offloaded(t, "stage 0 forward #1", "stage 0 forward #2")
		damage(t, tier, paths)
		ts, err := tier.Load(hs[0])
		if err == nil {
			return "loaded", fmt.Errorf("Load succeeded with %d tensors", len(ts))
		}
		if ts != nil {
			return "data", fmt.Errorf("Load returned data with its error %v", err)
		}
		if st := tier.Stats(); st.OffloadedBytes != 256 {
			return "error", fmt.Errorf("stats after the failed load %+v, want the other chunk's 256 bytes offloaded", st)
		}
		return "error", err
	}
}

func badSwapCases(t *testing.T) []badSwapCase {
	return []badSwapCase{
		{"a data byte flipped", loadFails(func(t *testing.T, _ *swap.Tier, p []string) { flipByte(t, p[0], -10) }),
			[]string{"stage 0 forward #1", "1.bin", "data checksum mismatch"}},
		{"a header byte flipped (the tag)", loadFails(func(t *testing.T, _ *swap.Tier, p []string) { flipByte(t, p[0], 36) }),
			[]string{"stage 0 forward #1", "1.bin", "header checksum mismatch"}},
		{"a shape byte flipped", loadFails(func(t *testing.T, _ *swap.Tier, p []string) { flipByte(t, p[0], 60) }),
			[]string{"stage 0 forward #1", "1.bin", "header checksum mismatch"}},
		{"the checksum flipped", loadFails(func(t *testing.T, _ *swap.Tier, p []string) { flipByte(t, p[0], -1) }),
			[]string{"1.bin", "data checksum mismatch"}},
		{"two chunks' files exchanged", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			tmp := p[0] + ".tmp"
			for _, mv := range [][2]string{{p[0], tmp}, {p[1], p[0]}, {tmp, p[1]}} {
				if err := os.Rename(mv[0], mv[1]); err != nil {
					t.Fatal(err)
				}
			}
		}), []string{"load of stage 0 forward #1", "1.bin", "holds chunk #2 (stage 0 forward #2), want chunk #1 (stage 0 forward #1)"}},
		{"another tier's file of the same chunk", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			_, _, other := offloaded(t, "stage 0 forward #1")
			if err := os.Rename(other[0], p[0]); err != nil {
				t.Fatal(err)
			}
		}), []string{"stage 0 forward #1", "1.bin", "written by another swap tier"}},
		{"truncated to half", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			if err := os.Truncate(p[0], 150); err != nil {
				t.Fatal(err)
			}
		}), []string{"stage 0 forward #1", "1.bin", "holds 150 bytes, want 346"}},
		{"truncated into the header", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			if err := os.Truncate(p[0], 40); err != nil {
				t.Fatal(err)
			}
		}), []string{"1.bin", "unexpected EOF"}},
		{"empty file", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			if err := os.Truncate(p[0], 0); err != nil {
				t.Fatal(err)
			}
		}), []string{"1.bin", "holds 0 bytes", "too short"}},
		{"bytes appended", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			f, err := os.OpenFile(p[0], os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(make([]byte, 8))
			f.Close()
		}), []string{"1.bin", "holds 354 bytes, want 346"}},
		{"not a swap file", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			if err := os.WriteFile(p[0], []byte(strings.Repeat("garbage!", 50)), 0o600); err != nil {
				t.Fatal(err)
			}
		}), []string{"1.bin", "not a ppgen swap file"}},
		{"header length 4 GiB", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			for off := int64(12); off < 16; off++ {
				flipByte(t, p[0], off) // 0x40 in every byte: 0x40404xxx and up
			}
		}), []string{"1.bin", "header length", "out of range"}},
		{"file removed", loadFails(func(t *testing.T, _ *swap.Tier, p []string) {
			if err := os.Remove(p[0]); err != nil {
				t.Fatal(err)
			}
		}), []string{"stage 0 forward #1", "1.bin", "no such file"}},
		{"stale directory of a killed process", func(t *testing.T) (string, error) {
			parent := t.TempDir()
			dir, kill := swapChild(t, parent)
			kill()
			tier, err := swap.NewFile(parent)
			if err != nil {
				return "error", err
			}
			defer tier.Close()
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				return "kept", fmt.Errorf("the dead process's %s is still there (%v)", filepath.Base(dir), err)
			}
			return "removed", errors.New("removed ppgen-swap-PID-RANDOM: its lock was free")
		}, []string{"removed ppgen-swap-PID-RANDOM"}},
		{"directory of a live process", func(t *testing.T) (string, error) {
			parent := t.TempDir()
			dir, kill := swapChild(t, parent)
			defer kill()
			tier, err := swap.NewFile(parent)
			if err != nil {
				return "error", err
			}
			defer tier.Close()
			if fs := chunkFiles(t, dir); len(fs) != 1 {
				return "removed", fmt.Errorf("the live process's directory holds %v, want its chunk file", fs)
			}
			return "kept", errors.New("kept: its lock is held")
		}, []string{"kept: its lock is held"}},
	}
}

// TestBadSwapFiles damages swap files in every way listed and checks that
// the load fails naming the chunk and the file, quickly and without
// allocating; stale directories of dead processes go, live ones stay. With
// -update it writes the table of docs/trust.md (region swap).
func TestBadSwapFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("flock")
	}
	var rows [][]string
	for _, c := range badSwapCases(t) {
		t.Run(c.name, func(t *testing.T) {
			var result string
			var err error
			took, peak := doctable.Measure(time.Millisecond, func() { result, err = c.run(t) })
			wantErr(t, c.name, err, c.want...)
			if took > 10*time.Second || peak > 1<<30 {
				t.Errorf("took %v, heap peak %d bytes", took, peak)
			}
			msg := ""
			if err != nil {
				msg = shortenPaths(err.Error())
			}
			rows = append(rows, []string{c.name, result, took.Round(100 * time.Microsecond).String(), fmt.Sprintf("%.1f MiB", float64(peak)/(1<<20)), "`" + msg + "`"})
		})
	}
	if *update && !t.Failed() {
		if err := doctable.Replace("../../docs/trust.md", "swap", []string{"case", "result", "time", "peak memory", "message"}, rows); err != nil {
			t.Fatal(err)
		}
	}
}

// shortenPaths replaces the temporary directories in an error message with
// DIR, and a tier's own directory with DIR/ppgen-swap-PID-RANDOM, so that
// the table holds no path of the machine that made it.
func shortenPaths(msg string) string {
	tmp := regexp.MustCompile(regexp.QuoteMeta(os.TempDir()) + `[^\s:]*`)
	return tmp.ReplaceAllStringFunc(msg, func(p string) string {
		if k := strings.Index(p, "ppgen-swap-"); k >= 0 {
			rest := p[k:]
			if j := strings.IndexByte(rest, filepath.Separator); j >= 0 {
				return "DIR/ppgen-swap-PID-RANDOM" + rest[j:]
			}
			return "DIR/ppgen-swap-PID-RANDOM"
		}
		return "DIR"
	})
}

// TestHelperSwapProcess is not a test: swapChild runs the test binary as a
// process that makes a file tier under SWAP_HELPER_DIR, offloads a chunk,
// prints the tier's directory and waits to be killed.
func TestHelperSwapProcess(t *testing.T) {
	parent := os.Getenv("SWAP_HELPER_DIR")
	if parent == "" {
		t.Skip("helper process")
	}
	if os.Getenv("SWAP_HELPER_IGNORE_HUP") != "" {
		signal.Ignore(syscall.SIGHUP) // as nohup starts a process
	}
	tier, err := swap.NewFile(parent)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	h, err := tier.Offload([]*tensor.Dense{tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))}, "child")
	if err == nil {
		err = tier.Wait(h)
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("dir", tier.Dir())
	time.Sleep(time.Minute)
	os.Exit(0)
}

// swapChild starts a process holding a file tier under parent and returns
// the tier's directory and a function that SIGKILLs the process and waits
// for it.
func swapChild(t *testing.T, parent string) (string, func()) {
	t.Helper()
	dir, _, kill := swapChildCmd(t, parent)
	return dir, kill
}

// swapChildCmd is swapChild that also returns the process.
func swapChildCmd(t *testing.T, parent string, env ...string) (string, *exec.Cmd, func()) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^TestHelperSwapProcess$")
	c.Env = append(os.Environ(), "SWAP_HELPER_DIR="+parent)
	c.Env = append(c.Env, env...)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			c.Process.Signal(syscall.SIGKILL)
			c.Wait()
		})
	}
	t.Cleanup(kill)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if dir, ok := strings.CutPrefix(sc.Text(), "dir "); ok {
			return dir, c, kill
		}
		t.Fatalf("helper: %s", sc.Text())
	}
	t.Fatalf("helper printed no directory: %v", sc.Err())
	return "", nil, nil
}

// TestStaleDirs: a tier removes the directory of a tier whose process was
// killed, keeps those of live tiers (in another process and in this one),
// and leaves directories that are not a tier's alone.
func TestStaleDirs(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("flock")
	}
	parent := t.TempDir()
	childDir, kill := swapChild(t, parent)
	mine, err := swap.NewFile(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	foreign := filepath.Join(parent, "ppgen-swap-123-notours") // no lock file: not a tier's
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	// Directories still under their first name, with a free lock: a fresh
	// one may be a tier about to lock it, an old one is stale.
	fresh, old := filepath.Join(parent, ".ppgen-swap-new-1"), filepath.Join(parent, ".ppgen-swap-new-2")
	for _, d := range []string{fresh, old} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "lock"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(old, time.Now().Add(-2*time.Minute), time.Now().Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	second, err := swap.NewFile(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{childDir, mine.Dir(), foreign, fresh} {
		if !isDir(d) {
			t.Errorf("%s of a live tier (or none) was removed", d)
		}
	}
	if isDir(old) {
		t.Errorf("%s, old and unlocked, is still there", old)
	}
	second.Close()
	kill()
	third, err := swap.NewFile(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if isDir(childDir) {
		t.Errorf("%s of a killed process is still there", childDir)
	}
	for _, d := range []string{mine.Dir(), third.Dir(), foreign} {
		if !isDir(d) {
			t.Errorf("%s was removed", d)
		}
	}
	if name := filepath.Base(mine.Dir()); !strings.HasPrefix(name, fmt.Sprintf("ppgen-swap-%d-", os.Getpid())) {
		t.Errorf("directory %s is not named after its process", name)
	}
}
