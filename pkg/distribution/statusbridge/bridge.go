package statusbridge

import (
	"sync"

	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/model"
)

// Source adapts a distribution server to controller.RealizationSource.
type Source struct {
	Server *server.Server
}

var _ controller.RealizationSource = Source{}

// Realization implements controller.RealizationSource. Counts refer to the
// API object's metadata.generation the current policy was computed from.
func (s Source) Realization(ref model.PolicyRef) (controller.RealizationSummary, bool) {
	sum, ok := s.Server.SummaryByRef(ref)
	if !ok {
		return controller.RealizationSummary{}, false
	}
	return controller.RealizationSummary{
		Generation: sum.SourceGeneration,
		Realized:   sum.Realized,
		Total:      sum.SpanNodes,
		Failed:     sum.Failed,
	}, true
}

// Notifier forwards summary changes to a controller set after the server
// was created (the two are built in either order).
type Notifier struct {
	mu   sync.Mutex
	ctrl interface{ RealizationChanged(model.PolicyRef) }
}

// Set names the controller to notify.
func (n *Notifier) Set(c interface{ RealizationChanged(model.PolicyRef) }) {
	n.mu.Lock()
	n.ctrl = c
	n.mu.Unlock()
}

// Sink is the server.SummarySink to pass in server.Options.OnSummary.
func (n *Notifier) Sink(s server.Summary) {
	n.mu.Lock()
	c := n.ctrl
	n.mu.Unlock()
	if c != nil {
		c.RealizationChanged(s.Source)
	}
}
