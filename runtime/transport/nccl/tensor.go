package nccl

import (
	"fmt"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

// payloadOf returns the bytes of t (wire.PayloadOf), within maxBytes, its
// dims its own.
func payloadOf(t *tensor.Dense, maxBytes int64) (wire.Payload, error) {
	p, err := wire.PayloadOf(t)
	if err != nil {
		return wire.Payload{}, err
	}
	if int64(len(p.Raw)) > maxBytes {
		return wire.Payload{}, fmt.Errorf("tensor of shape %v is %d bytes, over %d (MaxMessageBytes)", p.Dims, len(p.Raw), maxBytes)
	}
	p.Dims = append([]int(nil), p.Dims...)
	return p, nil
}
