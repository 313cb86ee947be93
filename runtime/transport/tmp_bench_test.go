package transport

import (
	"io"
	"testing"
)

func BenchmarkTmpRawAlloc(b *testing.B) {
	c, rc := loopbackPair(b)
	done := make(chan error, 1)
	go func() {
		for range b.N {
			buf := make([]float32, benchBytes/4)
			_, raw := alloc(dtFloat32, []int{benchBytes / 4})
			_ = buf
			if _, err := io.ReadFull(rc, raw); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	src := make([]byte, benchBytes)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(src); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}
