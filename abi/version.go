package abi

// Version is the version of the API generated code calls in runtime/pipe.
// Generated code references the runtime constant named by VersionGuard, so
// that its build breaks against a runtime/pipe that no longer supports it
// (runtime/pipe's package doc, "Versioning"). An incompatible change of
// that API, or of anything in this package that generated code encodes
// (the table letters, the At layout), increments Version.
const Version = 2

// VersionGuard is the name of the runtime/pipe constant generated code
// references: "SupportPackageIsVersion" followed by Version.
const VersionGuard = "SupportPackageIsVersion2"
