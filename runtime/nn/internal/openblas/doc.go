// Package openblas calls OpenBLAS's single-precision and double-precision
// GEMM (cblas_sgemm, cblas_dgemm) through cgo, for runtime/nn's benchmarks
// to run the peer side by side with its own GEMM. It is built only under
// the openblas build tag (libopenblas-dev installed); without the tag
// Available is false and the products panic.
//
//	go test -tags openblas -run '^$' -bench 'GEMM' -cpu 1 ./runtime/nn/
package openblas
