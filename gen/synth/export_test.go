package synth

// ExactBound is exactBound for the external tests, which lower programs
// with gen (which imports this package).
var ExactBound = exactBound
