package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tierflow/tierflow/pkg/explain/load"
)

// WaitRealized waits until the controller holds exactly the policies that
// the live API objects compute to (pkg/explain/load runs the controller's
// own engine over them), each at the object's current generation, and
// reports each realized on every node of its span. It returns the live
// objects it last read, for Expected.
func (tf *Tierflow) WaitRealized(timeout time.Duration) (*load.Built, error) {
	deadline := time.Now().Add(timeout)
	for {
		built, why, err := tf.realized()
		if err != nil {
			return nil, err
		}
		if why == "" {
			return built, nil
		}
		for _, p := range tf.procs {
			if err := p.ExitErr(); err != nil {
				return nil, fmt.Errorf("%s exited: %v", p.Name, err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("policies not realized after %v: %s", timeout, why)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// realized returns why the cluster is not realized yet ("" when it is).
func (tf *Tierflow) realized() (*load.Built, string, error) {
	built, _, err := tf.LiveObjects()
	if err != nil {
		return nil, "", err
	}
	want := map[string]int64{}
	for _, p := range built.Snapshot.Policies {
		want[p.Source.String()] = p.SourceGeneration
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := tf.Query.Policies(ctx)
	if err != nil {
		return nil, fmt.Sprintf("controller query API: %v", err), nil
	}
	var why []string
	seen := map[string]bool{}
	for _, p := range got.Policies {
		ref := p.Source.String()
		seen[ref] = true
		gen, ok := want[ref]
		switch {
		case !ok:
			why = append(why, ref+" still held by the controller")
		case p.SourceGeneration != gen:
			why = append(why, fmt.Sprintf("%s at generation %d in the controller, %d in the API", ref, p.SourceGeneration, gen))
		case len(p.Realization.Failed) > 0:
			// A failure is final for this generation: report it rather
			// than wait.
			return nil, "", fmt.Errorf("%s failed on nodes: %v", ref, p.Realization.Failed)
		case p.Realization.Realized < p.Realization.SpanNodes:
			why = append(why, fmt.Sprintf("%s realized on %d of %d nodes", ref, p.Realization.Realized, p.Realization.SpanNodes))
		}
	}
	for ref := range want {
		if !seen[ref] {
			why = append(why, ref+" not computed by the controller yet")
		}
	}
	sort.Strings(why)
	return built, strings.Join(why, "; "), nil
}
