package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	var out, errs bytes.Buffer
	code := run([]string{"launch", "-n", "2", "--", "sh", "-c", "echo hello from $RANK of $WORLD_SIZE"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"[rank 0] hello from 0 of 2", "[rank 1] hello from 1 of 2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	errs.Reset()
	code = run([]string{"launch", "-n", "3", "-grace", "1s", "--", "sh", "-c", `if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30`}, &out, &errs)
	if code != 2 || !strings.Contains(errs.String(), "rank 1") {
		t.Errorf("a failing rank: exit %d, stderr:\n%s", code, errs.String())
	}
}

func TestLaunchUsage(t *testing.T) {
	for _, args := range [][]string{{"launch"}, {"launch", "-n", "2"}, {"launch", "-n", "x", "--", "true"}} {
		var out, errs bytes.Buffer
		if code := run(args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs.String())
		}
	}
}
