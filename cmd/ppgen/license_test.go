package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bsd3 is the BSD 3-Clause License as SPDX publishes it (BSD-3-Clause, the
// licence of Go and of PyTorch), with its copyright line left to fill.
const bsd3 = `Copyright <year> <owner>

Redistribution and use in source and binary forms, with or without modification, are permitted provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this list of conditions and the following disclaimer.

2. Redistributions in binary form must reproduce the above copyright notice, this list of conditions and the following disclaimer in the documentation and/or other materials provided with the distribution.

3. Neither the name of the copyright holder nor the names of its contributors may be used to endorse or promote products derived from this software without specific prior written permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.`

// TestLicense: the repository's LICENSE is the BSD 3-Clause text word for
// word (line breaks aside), copyright 2026 The ppgen Authors.
func TestLicense(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "LICENSE"))
	if err != nil {
		t.Fatalf("no LICENSE at the repository root: %v", err)
	}
	want := strings.Replace(bsd3, "<year> <owner>", "2026 The ppgen Authors", 1)
	got, wantWords := strings.Fields(string(b)), strings.Fields(want)
	if strings.Join(got, " ") != strings.Join(wantWords, " ") {
		for i := range min(len(got), len(wantWords)) {
			if got[i] != wantWords[i] {
				t.Fatalf("LICENSE differs from BSD-3-Clause at word %d: %q, want %q", i+1, got[i], wantWords[i])
			}
		}
		t.Fatalf("LICENSE has %d words, BSD-3-Clause %d", len(got), len(wantWords))
	}
	if !strings.HasPrefix(string(b), "Copyright 2026 The ppgen Authors\n") {
		t.Errorf("LICENSE does not start with its copyright line: %.60q", b)
	}
}
