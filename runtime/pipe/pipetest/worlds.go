package pipetest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/transport"
)

// InProcWorld returns an in-process world of n ranks whose receives time
// out after timeout.
func InProcWorld(n int, timeout time.Duration) []transport.Transport {
	return transport.NewInProc(n, transport.InProcTimeout(timeout))
}

// TCPWorld connects n TCP ranks (goroutines) on 127.0.0.1 with schedule
// fingerprint fp; mod, if set, adjusts each rank's config first.
func TCPWorld(t testing.TB, n int, fp string, mod func(r int, c *transport.TCPConfig)) []transport.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*transport.TCP, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := transport.TCPConfig{Rank: r, World: n, MasterAddr: ln.Addr().String(), Token: "5ec7e75ec7e75ec7e75ec7e75ec7e75e", Fingerprint: fp,
			Timeout: 20 * time.Second, RendezvousTimeout: 10 * time.Second}
		if r == 0 {
			cfg.Listener = ln
		}
		if mod != nil {
			mod(r, &cfg)
		}
		wg.Go(func() { trs[r], errs[r] = transport.DialTCP(context.Background(), cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	out := make([]transport.Transport, n)
	for r, tr := range trs {
		out[r] = tr
	}
	return out
}
