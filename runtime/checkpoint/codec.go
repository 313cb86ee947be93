package checkpoint

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// The shard file format (docs/checkpoints.md): Magic, the format Version
// (uint32), records, an end record, and the CRC-32C (Castagnoli) of every
// byte before it. All integers are little-endian.
const (
	Magic   = "PPGNCKPT"
	Version = 1
)

// Record kinds of a shard file.
const (
	recEnd   = 0
	recParam = 1
	recFlat  = 2
	recBlob  = 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// littleEndian reports whether the host stores numbers little-endian, so
// that a tensor's memory is its bytes in the file.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// ErrCorrupt is wrapped by every error about a shard's bytes (bad magic,
// version, length, checksum, truncation).
var ErrCorrupt = errors.New("corrupt shard")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// flushWriter is a buffered writer: a *bufio.Writer, or a fileWriter.
type flushWriter interface {
	io.Writer
	Flush() error
}

// encoder writes a shard and its running CRC-32C.
type encoder struct {
	w       flushWriter
	crc     uint32
	n       int64
	err     error
	scratch []byte
	num     [8]byte
}

func (e *encoder) write(p []byte) {
	if e.err != nil {
		return
	}
	if fw, ok := e.w.(*fileWriter); ok && len(p) >= 2*crcChunk {
		e.crc, e.err = fw.writeChecksummed(e.crc, p)
	} else if len(p) >= 2*crcChunk {
		e.crc, e.err = crcOverlapped(e.crc, p, func(b []byte) error { _, err := e.w.Write(b); return err })
	} else {
		e.crc = crc32.Update(e.crc, castagnoli, p)
		_, e.err = e.w.Write(p)
	}
	e.n += int64(len(p))
}

func (e *encoder) u8(v uint8) { e.num[0] = v; e.write(e.num[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.num[:], v)
	e.write(e.num[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.num[:], v)
	e.write(e.num[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.num[:], v)
	e.write(e.num[:8])
}
func (e *encoder) str(s string) { e.u16(uint16(len(s))); e.write([]byte(s)) }

func (e *encoder) shape(s []int) {
	e.u8(uint8(len(s)))
	for _, d := range s {
		e.u64(uint64(d))
	}
}

func (e *encoder) tensor(t Tensor) {
	e.u8(uint8(t.DType()))
	e.shape(t.Shape)
	if t.F64 != nil {
		writeElems(e, t.F64)
	} else {
		writeElems(e, t.F32)
	}
}

// writeElems writes x's elements little-endian: its memory on a
// little-endian host, byte-swapped copies otherwise.
func writeElems[T float32 | float64](e *encoder, x []T) {
	if len(x) == 0 {
		return
	}
	size := int(unsafe.Sizeof(x[0]))
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*size)
	if littleEndian {
		e.write(raw)
		return
	}
	const chunk = 1 << 16
	if len(e.scratch) < chunk {
		e.scratch = make([]byte, chunk)
	}
	for len(raw) > 0 {
		n := min(len(raw), chunk)
		copy(e.scratch, raw[:n])
		swap(e.scratch[:n], size)
		e.write(e.scratch[:n])
		raw = raw[n:]
	}
}

// swap reverses the bytes of every size-byte element of b.
func swap(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		if size == 4 {
			binary.LittleEndian.PutUint32(b[i:], bits.ReverseBytes32(binary.LittleEndian.Uint32(b[i:])))
		} else {
			binary.LittleEndian.PutUint64(b[i:], bits.ReverseBytes64(binary.LittleEndian.Uint64(b[i:])))
		}
	}
}

func (e *encoder) state(state []NamedTensor, scalars map[string]float64) {
	e.u32(uint32(len(state)))
	for _, st := range state {
		e.str(st.Name)
		e.tensor(st.Tensor)
	}
	e.u32(uint32(len(scalars)))
	for _, name := range slices.Sorted(maps.Keys(scalars)) {
		e.str(name)
		e.u64(math.Float64bits(scalars[name]))
	}
}

// Encode writes s in the shard format to w and returns the bytes written
// and their CRC-32C (the file's last four bytes). It checks s first
// (Shard.Check).
func Encode(w io.Writer, s *Shard) (n int64, crc uint32, err error) {
	if err := s.Check(); err != nil {
		return 0, 0, err
	}
	bw, ok := w.(flushWriter) // a *bufio.Writer, or WriteShard's fileWriter
	if !ok {
		bw = bufio.NewWriterSize(w, ioBuffer)
	}
	e := &encoder{w: bw}
	e.write([]byte(Magic))
	e.u32(Version)
	for _, p := range s.Params {
		e.u8(recParam)
		e.u32(uint32(p.Layer))
		e.str(p.Name)
		e.tensor(p.Value)
		e.state(p.State, p.Scalars)
	}
	for _, f := range s.Flats {
		e.u8(recFlat)
		e.str(f.Name)
		e.u32(uint32(f.Index))
		e.u32(uint32(f.Of))
		e.u32(uint32(len(f.Members)))
		for _, m := range f.Members {
			e.u32(uint32(m.Layer))
			e.str(m.Name)
			e.shape(m.Shape)
		}
		e.tensor(f.Value)
		e.state(f.State, f.Scalars)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Blobs)) {
		e.u8(recBlob)
		e.str(name)
		e.u64(uint64(len(s.Blobs[name])))
		e.write(s.Blobs[name])
	}
	e.u8(recEnd)
	crc = e.crc
	binary.LittleEndian.PutUint32(e.num[:], crc)
	if e.err == nil {
		_, e.err = bw.Write(e.num[:4])
		e.n += 4
	}
	if e.err == nil {
		e.err = bw.Flush()
	}
	return e.n, crc, e.err
}

// Filter selects what Decode keeps: the parameters of the layers Layer
// accepts and the flats Flat accepts (nil accepts all). What it drops is
// still read and checksummed, not kept.
type Filter struct {
	Layer func(layer int) bool
	Flat  func(name string) bool
	// Into, when set, gives the memory a kept parameter's value (state
	// "") or optimizer tensor (state its name) is read into: a Tensor of
	// the saved dtype and element count, or the zero Tensor to allocate
	// one. The Param then holds it (with the saved shape). Restoring into
	// a model's own tensors this way saves an allocation and a copy.
	Into func(layer int, name, state string) Tensor
}

// into is f.Into, or nothing.
func (f Filter) into(layer int, name, state string) Tensor {
	if f.Into == nil {
		return Tensor{}
	}
	return f.Into(layer, name, state)
}

// decoder reads a shard of a known size, counting what is left.
type decoder struct {
	r       io.Reader
	crc     uint32
	left    int64 // bytes before the trailing CRC not read yet
	num     [8]byte
	scratch []byte
}

// read fills p, which the caller has checked fits in what is left.
func (d *decoder) read(p []byte) error {
	if int64(len(p)) > d.left {
		return corrupt("a field of %d bytes runs past the end (%d bytes left)", len(p), d.left)
	}
	if len(p) >= 2*crcChunk {
		return d.readLarge(p)
	}
	if err := readFull(d.r, p); err != nil {
		return err
	}
	d.crc = crc32.Update(d.crc, castagnoli, p)
	d.left -= int64(len(p))
	return nil
}

// readLarge is read for a large p, checksummed while it is read: in
// pieces at once from a shard file (fileReader.readChecksummed), else
// in order while other goroutines sum the pieces read (crcOverlapped).
func (d *decoder) readLarge(p []byte) error {
	var crc uint32
	var err error
	if fr, ok := d.r.(*fileReader); ok {
		crc, err = fr.readChecksummed(d.crc, p)
	} else {
		crc, err = crcOverlapped(d.crc, p, func(b []byte) error { return readFull(d.r, b) })
	}
	if err != nil {
		return err
	}
	d.crc = crc
	d.left -= int64(len(p))
	return nil
}

func readFull(r io.Reader, p []byte) error {
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return corrupt("truncated")
		}
		return err
	}
	return nil
}

func (d *decoder) u8() (uint8, error) {
	err := d.read(d.num[:1])
	return d.num[0], err
}
func (d *decoder) u16() (uint16, error) {
	err := d.read(d.num[:2])
	return binary.LittleEndian.Uint16(d.num[:]), err
}
func (d *decoder) u32() (uint32, error) {
	err := d.read(d.num[:4])
	return binary.LittleEndian.Uint32(d.num[:]), err
}
func (d *decoder) u64() (uint64, error) {
	err := d.read(d.num[:8])
	return binary.LittleEndian.Uint64(d.num[:]), err
}

// count reads a uint32 count of items of at least min bytes each.
func (d *decoder) count(what string, min int64) (int, error) {
	n, err := d.u32()
	if err != nil {
		return 0, err
	}
	if n > MaxItems || int64(n)*min > d.left {
		return 0, corrupt("%d %s: over %d or past the end (%d bytes left)", n, what, MaxItems, d.left)
	}
	return int(n), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.u16()
	if err != nil {
		return "", err
	}
	if n > MaxName {
		return "", corrupt("a name of %d bytes, over %d", n, MaxName)
	}
	if int64(n) > d.left {
		return "", corrupt("a name of %d bytes runs past the end", n)
	}
	b := make([]byte, n)
	err = d.read(b)
	return string(b), err
}

func (d *decoder) layer() (int, error) {
	v, err := d.u32()
	if err == nil && v > MaxLayer {
		err = corrupt("layer %d over %d", v, MaxLayer)
	}
	return int(v), err
}

func (d *decoder) shape() ([]int, int64, error) {
	nd, err := d.u8()
	if err != nil {
		return nil, 0, err
	}
	if nd > MaxDims {
		return nil, 0, corrupt("%d dimensions, over %d", nd, MaxDims)
	}
	s := make([]int, nd)
	for i := range s {
		v, err := d.u64()
		if err != nil {
			return nil, 0, err
		}
		if v > MaxElems {
			return nil, 0, corrupt("dimension %d over %d", v, int64(MaxElems))
		}
		s[i] = int(v)
	}
	n, err := elems(s)
	if err != nil {
		return nil, 0, corrupt("%v", err)
	}
	return s, n, nil
}

// tensor reads a tensor, into dst's memory when dst holds elements; with
// keep false it checksums its elements into scratch and returns only its
// shape.
func (d *decoder) tensor(keep bool, dst Tensor) (Tensor, error) {
	dt, err := d.u8()
	if err != nil {
		return Tensor{}, err
	}
	if dt != uint8(Float32) && dt != uint8(Float64) {
		return Tensor{}, corrupt("dtype %d, want %d (float32) or %d (float64)", dt, Float32, Float64)
	}
	shape, n, err := d.shape()
	if err != nil {
		return Tensor{}, err
	}
	size := int64(DType(dt).Size())
	if n > d.left/size {
		return Tensor{}, corrupt("a %v tensor %v of %d bytes runs past the end (%d bytes left)", DType(dt), shape, n*size, d.left)
	}
	t := Tensor{Shape: shape}
	if !keep {
		return t, d.skip(n * size)
	}
	if dst.Len() > 0 || dst.F32 != nil || dst.F64 != nil {
		if dst.DType() != DType(dt) || int64(dst.Len()) != n {
			return Tensor{}, fmt.Errorf("saved as %v %v, the destination is %v of %d elements", DType(dt), shape, dst.DType(), dst.Len())
		}
		t.F32, t.F64 = dst.F32, dst.F64
		if t.F64 != nil {
			return t, readElems(d, t.F64)
		}
		return t, readElems(d, t.F32)
	}
	if DType(dt) == Float64 {
		t.F64 = make([]float64, n)
		return t, readElems(d, t.F64)
	}
	t.F32 = make([]float32, n)
	return t, readElems(d, t.F32)
}

func readElems[T float32 | float64](d *decoder, x []T) error {
	if len(x) == 0 {
		return nil
	}
	size := int(unsafe.Sizeof(x[0]))
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*size)
	if err := d.read(raw); err != nil {
		return err
	}
	if !littleEndian {
		swap(raw, size)
	}
	return nil
}

// skip reads and checksums n bytes, keeping none.
func (d *decoder) skip(n int64) error {
	if n > d.left {
		return corrupt("%d bytes run past the end", n)
	}
	if d.scratch == nil {
		d.scratch = make([]byte, 1<<16)
	}
	for n > 0 {
		k := min(n, int64(len(d.scratch)))
		if err := d.read(d.scratch[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (d *decoder) state(keep bool, into func(state string) Tensor) ([]NamedTensor, map[string]float64, error) {
	n, err := d.count("optimizer tensors", 2+1+1)
	if err != nil {
		return nil, nil, err
	}
	var state []NamedTensor
	for range n {
		name, err := d.str()
		if err != nil {
			return nil, nil, err
		}
		var dst Tensor
		if keep && into != nil {
			dst = into(name)
		}
		t, err := d.tensor(keep, dst)
		if err != nil {
			return nil, nil, fmt.Errorf("optimizer tensor %q: %w", short(name), err)
		}
		state = append(state, NamedTensor{Name: name, Tensor: t})
	}
	n, err = d.count("optimizer scalars", 2+8)
	if err != nil {
		return nil, nil, err
	}
	var scalars map[string]float64
	for range n {
		name, err := d.str()
		if err != nil {
			return nil, nil, err
		}
		v, err := d.u64()
		if err != nil {
			return nil, nil, err
		}
		if scalars == nil {
			scalars = map[string]float64{}
		}
		scalars[name] = math.Float64frombits(v)
	}
	return state, scalars, nil
}

// Decode reads a shard of size bytes from r, keeping what f selects, and
// checks its magic, version, lengths and CRC-32C. Errors about the bytes
// wrap ErrCorrupt.
func Decode(r io.Reader, size int64, f Filter) (*Shard, error) {
	s, _, err := decode(r, size, f)
	return s, err
}

// decode is Decode, also returning the shard's CRC-32C.
func decode(r io.Reader, size int64, f Filter) (*Shard, uint32, error) {
	const minSize = int64(len(Magic)) + 4 + 1 + 4
	if size < minSize {
		return nil, 0, corrupt("%d bytes, shorter than the smallest shard (%d)", size, minSize)
	}
	d := &decoder{r: r, left: size - 4}
	magic := make([]byte, len(Magic))
	if err := d.read(magic); err != nil {
		return nil, 0, err
	}
	if string(magic) != Magic {
		return nil, 0, corrupt("bad magic %q, want %q", magic, Magic)
	}
	v, err := d.u32()
	if err != nil {
		return nil, 0, err
	}
	if v != Version {
		return nil, 0, corrupt("format version %d, this reader knows %d", v, Version)
	}
	s := &Shard{}
	for {
		kind, err := d.u8()
		if err != nil {
			return nil, 0, err
		}
		if kind == recEnd {
			break
		}
		if len(s.Params)+len(s.Flats)+len(s.Blobs) >= MaxItems {
			return nil, 0, corrupt("over %d records", MaxItems)
		}
		switch kind {
		case recParam:
			err = d.param(s, f)
		case recFlat:
			err = d.flat(s, f)
		case recBlob:
			err = d.blob(s)
		default:
			err = corrupt("record kind %d", kind)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if d.left != 0 {
		return nil, 0, corrupt("%d bytes after the end record", d.left)
	}
	want := d.crc
	if _, err := io.ReadFull(r, d.num[:4]); err != nil {
		return nil, 0, corrupt("truncated: no checksum")
	}
	if got := binary.LittleEndian.Uint32(d.num[:]); got != want {
		return nil, 0, corrupt("checksum mismatch: the file says %08x, its bytes sum to %08x", got, want)
	}
	if err := s.Check(); err != nil {
		return nil, 0, corrupt("%v", err)
	}
	return s, want, nil
}

func (d *decoder) param(s *Shard, f Filter) error {
	layer, err := d.layer()
	if err != nil {
		return err
	}
	name, err := d.str()
	if err != nil {
		return err
	}
	keep := f.Layer == nil || f.Layer(layer)
	var dst Tensor
	if keep {
		dst = f.into(layer, name, "")
	}
	v, err := d.tensor(keep, dst)
	if err != nil {
		return fmt.Errorf("layer %d parameter %q: %w", layer, short(name), err)
	}
	state, scalars, err := d.state(keep, func(st string) Tensor { return f.into(layer, name, st) })
	if err != nil {
		return fmt.Errorf("layer %d parameter %q: %w", layer, short(name), err)
	}
	if keep {
		s.Params = append(s.Params, Param{Layer: layer, Name: name, Value: v, State: state, Scalars: scalars})
	}
	return nil
}

func (d *decoder) flat(s *Shard, f Filter) error {
	name, err := d.str()
	if err != nil {
		return err
	}
	idx, err := d.u32()
	if err != nil {
		return err
	}
	of, err := d.u32()
	if err != nil {
		return err
	}
	if of < 1 || of > MaxItems || idx >= of {
		return corrupt("flat %q: chunk %d of %d", short(name), idx, of)
	}
	n, err := d.count("flat members", 4+2+1)
	if err != nil {
		return err
	}
	fl := Flat{Name: name, Index: int(idx), Of: int(of)}
	for range n {
		l, err := d.layer()
		if err != nil {
			return err
		}
		mn, err := d.str()
		if err != nil {
			return err
		}
		sh, _, err := d.shape()
		if err != nil {
			return err
		}
		fl.Members = append(fl.Members, Member{Layer: l, Name: mn, Shape: sh})
	}
	keep := f.Flat == nil || f.Flat(name)
	if fl.Value, err = d.tensor(keep, Tensor{}); err != nil {
		return fmt.Errorf("flat %q: %w", short(name), err)
	}
	if fl.State, fl.Scalars, err = d.state(keep, nil); err != nil {
		return fmt.Errorf("flat %q: %w", short(name), err)
	}
	if keep {
		s.Flats = append(s.Flats, fl)
	}
	return nil
}

func (d *decoder) blob(s *Shard) error {
	name, err := d.str()
	if err != nil {
		return err
	}
	n, err := d.u64()
	if err != nil {
		return err
	}
	if n > uint64(d.left) {
		return corrupt("blob %q of %d bytes runs past the end (%d bytes left)", short(name), n, d.left)
	}
	b := make([]byte, n)
	if err := d.read(b); err != nil {
		return err
	}
	if s.Blobs == nil {
		s.Blobs = map[string][]byte{}
	}
	if _, dup := s.Blobs[name]; dup {
		return corrupt("blob %q twice", short(name))
	}
	s.Blobs[name] = b
	return nil
}

// short cuts a name read from a shard, maybe garbage, for an error.
func short(s string) string {
	const n = 40
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
