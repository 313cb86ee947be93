// Package abi is the one vocabulary that gen/ (the compiler) and runtime/
// (what generated code calls) share: the step kinds with their text form,
// argument shape, transfer channel and table letter; the packed step
// argument At with its field layout; the size limits that layout imposes;
// and the version of the generated-code API. It plays the part protobuf-go's
// genid plays between protoc-gen-go and its runtime: neither side spells
// these facts itself, so they cannot drift apart.
//
// gen/ir (Kind, Channel), gen/emit, gen/vet and runtime/pipe (OpKind, At)
// all use it; their names for these types are aliases of abi's. abi
// imports only the standard library, nothing of this module, so both sides
// of the gen/runtime rule may depend on it without depending on each other.
//
// Adding a step kind starts with its row in kinds.go (docs/internals.md,
// "Adding a step kind").
package abi
