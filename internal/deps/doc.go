// Package deps holds the module's imports test (deps_test.go, in the style
// of go/build's deps test): the rules that keep the generator and the
// runtime apart and every arrow pointing down, checked on every
// `go test ./internal/...`. Tests are included, and an import counts
// directly or through other packages of the module.
//
//   - No gen/ package imports a runtime/ package, and no runtime/ package
//     imports a gen/ package. Tests that need both sides live in e2e/,
//     which belongs to neither.
//   - A runtime/ package imports only the standard library, gorgonia.org/...,
//     other runtime/ packages and the packages both sides share: abi/ (the
//     boundary package) and internal/chrometrace (the trace writer), which
//     import only the standard library. Its tests may also import
//     internal/doctable and internal/long.
//   - No package under internal/ imports gen/ or runtime/: runtime/ imports
//     internal/ packages, so such an import would run back up.
//   - e2e/ (the end-to-end harness and its generated program e2e/onerank)
//     may import anything, and only e2e/ imports it.
//   - runtime/world, which opens every transport by name, is the top of the
//     runtime: trainers (examples/, a user's main) and tests import it, no
//     other runtime/ package does.
//
// The package has no code of its own.
package deps
