package runtime

import (
	"sync"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// updateTimings keeps when the last updates from the controller passed
// each stage (the query socket's /v1/updates): what realization latency
// is made of, stamped where each stage happens rather than polled.
type updateTimings struct {
	mu   sync.Mutex
	last []agentquery.UpdateTiming // oldest first, at most MaxUpdateTimings
}

// start begins the timing of the update that brought d.
func (t *updateTimings) start(d *wire.Delta) *agentquery.UpdateTiming {
	ut := &agentquery.UpdateTiming{Version: d.Version, Full: d.Full, Received: d.Received}
	if tr := d.Trace; tr != nil {
		ut.Changed, ut.Queued, ut.Sent = unixTime(tr.Changed), unixTime(tr.Queued), unixTime(tr.Sent)
	}
	return ut
}

// finish records a timing.
func (t *updateTimings) finish(ut *agentquery.UpdateTiming, err error) {
	ut.Done = time.Now()
	if err != nil {
		ut.Error = err.Error()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.last) >= agentquery.MaxUpdateTimings {
		t.last = append(t.last[:0], t.last[1:]...)
	}
	t.last = append(t.last, *ut)
}

// list returns the recorded timings, oldest first.
func (t *updateTimings) list() []agentquery.UpdateTiming {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]agentquery.UpdateTiming{}, t.last...)
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// bundleTiming is when the bundles of one realization went to the switch:
// the first one's start, the switch's confirmation of the last one, and
// how many flow changes they carried.
type bundleTiming struct {
	start, committed time.Time
	changes          int
}
