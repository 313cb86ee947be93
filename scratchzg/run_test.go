package scratchzg

import (
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
)

func TestRunsAndInterprets(t *testing.T) {
	for _, mode := range []string{"straight", "interpret"} {
		trs := pipetest.InProcWorld(2, 10*time.Second)
		stages := pipetest.NewStages(2)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r := range 2 {
			x, err := pipe.New(pipe.Config{Rank: r, Spec: Spec, Stages: map[int]pipe.Stage{r: stages[r]},
				Loss: pipetest.MSE{}, Data: &pipetest.Data{}, Transport: trs[r], OptStep: func() error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			fn := Ranks[r]
			if mode == "interpret" {
				fn = func(x *pipe.Exec) error { return pipe.Interpret(x, Program[r]) }
			}
			wg.Go(func() { errs[r] = pipe.Run(x, fn) })
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("%s rank %d: %v", mode, r, err)
			}
		}
	}
}
