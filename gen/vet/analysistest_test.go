package vet

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

// TestAnalysistest runs the deliberately broken generated files of
// testdata/src through golang.org/x/tools/go/analysis/analysistest: each
// diagnostic must match a `// want` comment on its line and each want must
// be matched.
func TestAnalysistest(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), Analyzer, brokenNames()...)
}
