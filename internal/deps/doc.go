// Package deps holds the module's imports test (deps_test.go, in the style
// of go/build's deps test): the rule that keeps the generator and the runtime
// apart, checked on every `go test ./internal/...`.
//
//   - No gen/ package imports a runtime/ package, and no runtime/ package
//     imports a gen/ package, directly or through other packages of the
//     module, tests included. Tests that need both sides live in
//     internal/e2e, which belongs to neither.
//   - A runtime/ package imports only the standard library, gorgonia.org/...,
//     other runtime/ packages and the packages both sides share: abi/ (the
//     boundary package) and internal/chrometrace (the trace writer), which
//     import only the standard library. Its tests may also import
//     internal/doctable.
//   - runtime/world, which opens every transport by name, is the top of the
//     runtime: trainers (examples/, a user's main) and tests import it, no
//     other runtime/ package does.
//
// The package has no code of its own.
package deps
