package sim

import "sort"

// chunkTable maps (stage, micro) to an int (-1 when absent): a dense slice
// when stages × micro-batches is small next to the program, else a map (so a
// stray huge micro number in user input costs no memory).
type chunkTable struct {
	stages, mx int
	dense      []int32
	sparse     map[[2]int]int
}

func newChunkTable(stages, maxMicro, steps int) *chunkTable {
	t := &chunkTable{stages: stages, mx: maxMicro + 1}
	if n := stages * t.mx; stages > 0 && t.mx > 0 && n <= 4*steps+1024 {
		t.dense = make([]int32, n)
		for i := range t.dense {
			t.dense[i] = -1
		}
	} else {
		t.sparse = map[[2]int]int{}
	}
	return t
}

func (t *chunkTable) get(s, m int) int {
	if t.dense == nil {
		if v, ok := t.sparse[[2]int{s, m}]; ok {
			return v
		}
		return -1
	}
	if s < 0 || s >= t.stages || m < 0 || m >= t.mx {
		return -1
	}
	return int(t.dense[s*t.mx+m])
}

// setFirst records v unless (s, m) already has a value; it reports whether it did.
func (t *chunkTable) setFirst(s, m, v int) bool {
	if t.get(s, m) >= 0 {
		return false
	}
	if t.dense == nil {
		t.sparse[[2]int{s, m}] = v
		return true
	}
	if s < 0 || s >= t.stages || m < 0 || m >= t.mx {
		return false
	}
	t.dense[s*t.mx+m] = int32(v)
	return true
}

// watchers records, for each rank r, the ranks to revisit when r makes
// progress: a bit matrix for up to 4096 ranks, maps beyond.
type watchers struct {
	p     int
	words int
	bits  []uint64
	sets  []map[int]bool
}

func newWatchers(p int) *watchers {
	w := &watchers{p: p}
	if p <= 4096 {
		w.words = (p + 63) / 64
		w.bits = make([]uint64, p*w.words)
	} else {
		w.sets = make([]map[int]bool, p)
	}
	return w
}

// add makes q a watcher of r.
func (w *watchers) add(r, q int) {
	switch {
	case r == q:
	case w.bits != nil:
		w.bits[r*w.words+q/64] |= 1 << (q % 64)
	default:
		if w.sets[r] == nil {
			w.sets[r] = map[int]bool{}
		}
		w.sets[r][q] = true
	}
}

// lists returns every rank's watchers in ascending order.
func (w *watchers) lists() [][]int {
	out := make([][]int, w.p)
	for r := 0; r < w.p; r++ {
		if w.bits != nil {
			row := w.bits[r*w.words : (r+1)*w.words]
			for i, word := range row {
				for b := 0; word != 0; b++ {
					if word&1 != 0 {
						out[r] = append(out[r], i*64+b)
					}
					word >>= 1
				}
			}
			continue
		}
		for q := range w.sets[r] {
			out[r] = append(out[r], q)
		}
		sort.Ints(out[r])
	}
	return out
}
