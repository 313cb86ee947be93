//go:build analysistest

// This file runs the broken files of testdata/src through
// golang.org/x/tools/go/analysis/analysistest. analysistest imports
// golang.org/x/sync and golang.org/x/mod, which go.mod does not require
// yet, so it is built only with -tags analysistest once they are
// (`go get golang.org/x/tools/go/analysis/analysistest@v0.52.0`);
// TestBrokenFiles runs the same `// want` checks without them.

package vet

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

func TestAnalysistest(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), Analyzer, brokenNames()...)
}
