package world

// The run configuration's agreement at Open: every rank all-gathers a hash
// of its Options.Config over the world it just opened and compares it;
// when the hashes differ, the ranks all-gather the configurations
// themselves and every rank fails with a *ConfigError naming the first
// differing setting and the ranks that differ.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/transport"
)

// MaxConfigBytes bounds Options.Config, encoded (the keys and values and a
// separator each).
const MaxConfigBytes = 64 << 10

// ErrConfigMismatch is wrapped by every [*ConfigError].
var ErrConfigMismatch = errors.New("the ranks run different configurations")

// ConfigError is the refusal at Open of a world whose ranks run different
// configurations (Options.Config, with the world's own settings "size"
// and "collectives"): Key is the first setting (in key order) where some
// rank's value differs from rank 0's, Ranks those ranks (ascending),
// Values their values and Want rank 0's ("(unset)" for a rank that does
// not set Key). Every rank fails with the same ConfigError. Others lists
// the other keys that differ, if any.
type ConfigError struct {
	Key    string
	Want   string   // rank 0's value
	Ranks  []int    // the ranks whose value differs from rank 0's
	Values []string // their values, as Ranks
	Others []string // other differing keys, in key order
}

// unset is the value of a key a rank does not set, as errors show it.
const unset = "(unset)"

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "world: %v: rank %d runs %s, rank 0 %s", ErrConfigMismatch, e.Ranks[0], setting(e.Key, e.Values[0]), setting(e.Key, e.Want))
	if len(e.Ranks) > 1 {
		fmt.Fprintf(&b, " (ranks differing from rank 0 in %s: %s)", e.Key, rankList(e.Ranks))
	}
	if len(e.Others) > 0 {
		fmt.Fprintf(&b, "; they differ in %s too", strings.Join(e.Others, ", "))
	}
	b.WriteString(": start every rank with the same settings")
	return b.String()
}

func (e *ConfigError) Unwrap() error { return ErrConfigMismatch }

func setting(key, value string) string {
	if value == unset {
		return "no " + key
	}
	return key + " " + value
}

func rankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

// FlagConfig is a trainer's flags as an Options.Config: every flag of fs
// (set or at its default) keyed "-name", its value as the flag prints it,
// except the flags named in mayDiffer (those that may differ between ranks:
// timeouts, output files, local paths).
func FlagConfig(fs *flag.FlagSet, mayDiffer ...string) map[string]string {
	c := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(mayDiffer, f.Name) {
			c["-"+f.Name] = f.Value.String()
		}
	})
	return c
}

// runConfig is Options.Config with the world's own settings: the world
// size the job needs and the collectives mode. nil when Config is nil
// (no check).
func (o Options) runConfig() map[string]string {
	if o.Config == nil {
		return nil
	}
	c := make(map[string]string, len(o.Config)+2)
	c["size"] = strconv.Itoa(o.Size)
	mode := o.Collectives
	if mode == "" {
		mode = CollectiveModes[0]
	}
	c["collectives"] = mode
	for k, v := range o.Config {
		c[k] = v
	}
	return c
}

// encodeConfig is a configuration as bytes: "key=value\n" in key order,
// keys and values quoted when they hold '=' or a newline.
func encodeConfig(c map[string]string) []byte {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		b = append(b, strconv.Quote(k)...)
		b = append(b, '=')
		b = append(b, strconv.Quote(c[k])...)
		b = append(b, '\n')
	}
	return b
}

// decodeConfig inverts encodeConfig; a malformed text is an error.
func decodeConfig(b []byte) (map[string]string, error) {
	c := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		k, rest, err := unquotePrefix(line)
		if err != nil || !strings.HasPrefix(rest, "=") {
			return nil, fmt.Errorf("malformed configuration line %q", line)
		}
		v, rest, err := unquotePrefix(rest[1:])
		if err != nil || rest != "" {
			return nil, fmt.Errorf("malformed configuration line %q", line)
		}
		c[k] = v
	}
	return c, nil
}

func unquotePrefix(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	u, err := strconv.Unquote(q)
	return u, s[len(q):], err
}

// configChannel carries the exchange: it runs before the trainer's first
// message, and completes on every rank before any of them moves on.
const configChannel = abi.DataChannel

// agreeConfig checks that every rank of ep's world runs configuration c:
// an all-gather of its SHA-256 (over Send and Recv), then, when any
// differs, of the configurations themselves, and a *ConfigError naming
// the first differing key and the ranks, the same on every rank.
func agreeConfig(ep transport.Transport, c map[string]string) error {
	if ep.World() == 1 {
		return nil
	}
	comm, err := collective.New(ep, configChannel, collective.SendRecv())
	if err != nil {
		return err
	}
	text := encodeConfig(c)
	sum := sha256.Sum256(text)
	hashes, err := gatherBytes(comm, sum[:])
	if err != nil {
		return fmt.Errorf("world: comparing the ranks' run configurations: %w", err)
	}
	if !slices.ContainsFunc(hashes, func(h []byte) bool { return string(h) != string(sum[:]) }) {
		return nil
	}
	// Some rank differs: every rank saw it, so every rank is here.
	lens, err := gatherBytes(comm, binary.LittleEndian.AppendUint32(nil, uint32(len(text))))
	if err != nil {
		return fmt.Errorf("world: comparing the ranks' run configurations: %w", err)
	}
	longest := 0
	for _, l := range lens {
		longest = max(longest, int(binary.LittleEndian.Uint32(l)))
	}
	if longest > MaxConfigBytes {
		return fmt.Errorf("world: a rank's run configuration is %d bytes, over %d (%w)", longest, MaxConfigBytes, ErrConfigMismatch)
	}
	texts, err := gatherBytes(comm, append(text, make([]byte, longest-len(text))...))
	if err != nil {
		return fmt.Errorf("world: comparing the ranks' run configurations: %w", err)
	}
	cfgs := make([]map[string]string, len(texts))
	for r, t := range texts {
		if cfgs[r], err = decodeConfig(t[:binary.LittleEndian.Uint32(lens[r])]); err != nil {
			return fmt.Errorf("world: rank %d's run configuration: %w (%w)", r, err, transport.ErrProtocol)
		}
	}
	return compareConfigs(cfgs)
}

// compareConfigs returns the *ConfigError of configurations that differ
// (cfgs[r] rank r's), or nil.
func compareConfigs(cfgs []map[string]string) error {
	keys := map[string]bool{}
	for _, c := range cfgs {
		for k := range c {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	value := func(r int, k string) string {
		if v, ok := cfgs[r][k]; ok {
			return v
		}
		return unset
	}
	var e *ConfigError
	for _, k := range sorted {
		var ranks []int
		var vals []string
		for r := 1; r < len(cfgs); r++ {
			if v := value(r, k); v != value(0, k) {
				ranks, vals = append(ranks, r), append(vals, v)
			}
		}
		switch {
		case ranks == nil:
		case e == nil:
			e = &ConfigError{Key: k, Want: value(0, k), Ranks: ranks, Values: vals}
		default:
			e.Others = append(e.Others, k)
		}
	}
	if e == nil {
		return nil
	}
	return e
}

// gatherBytes all-gathers b (the same length on every rank) and returns
// every rank's, in rank order. The bytes travel 4 to a float64 (exact).
func gatherBytes(comm *collective.Comm, b []byte) ([][]byte, error) {
	k := (len(b) + 3) / 4
	v := make([]float64, k)
	for i := range v {
		var w [4]byte
		copy(w[:], b[min(4*i, len(b)):min(4*i+4, len(b))])
		v[i] = float64(binary.LittleEndian.Uint32(w[:]))
	}
	all, err := comm.AllGather(tensor.New(tensor.WithShape(k), tensor.WithBacking(v)))
	if err != nil {
		return nil, err
	}
	flat := all.Float64s()
	out := make([][]byte, comm.Size())
	for r := range out {
		buf := make([]byte, 0, 4*k)
		for _, x := range flat[r*k : (r+1)*k] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(x))
		}
		out[r] = buf[:len(b)]
	}
	return out, nil
}
