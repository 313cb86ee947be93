package par

import (
	"runtime"
	"testing"
	"time"
)

func TestKeep(t *testing.T) {
	var k Keep[[]int32]
	if v := k.Take(); v != nil {
		t.Fatalf("empty Keep: Take = %v, want nil", v)
	}
	buf := make([]int32, 8)
	k.Put(&buf)
	if v := k.Take(); v != &buf {
		t.Fatalf("Take after Put = %p, want %p", v, &buf)
	}
	if v := k.Take(); v != nil {
		t.Fatalf("second Take = %v, want nil (the value is out)", v)
	}
	// A value kept across a GC cycle or two is still there; one nobody
	// takes is dropped after some idle cycles.
	k.Put(&buf)
	runtime.GC()
	if v := k.Take(); v != &buf {
		t.Fatalf("Take after one GC = %p, want %p", v, &buf)
	}
	k.Put(&buf)
	for i := 0; i < 200; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond) // finalizers run on their own goroutine
		k.mu.Lock()
		held := k.v != nil
		k.mu.Unlock()
		if !held {
			return
		}
	}
	t.Fatalf("a value nobody takes is still kept after 200 GC cycles")
}
