package client

import (
	"log/slog"
	"sync"

	"github.com/tierflow/tierflow/pkg/distribution/client/statestore"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// saver writes the received state to the store in the background, latest
// first: while one save runs, newer states replace the waiting one, so a
// burst of updates costs one or two writes rather than one per update and
// never slows the stream. The file may lag the stream by a few versions;
// that is safe, because the agent resumes from the version in the file
// (the controller replays the rest or sends a full update).
type saver struct {
	store *statestore.Store
	log   *slog.Logger

	mu      sync.Mutex
	pending *savedState
	running bool
	idle    *sync.Cond
}

type savedState struct {
	epoch   string
	version uint64
	state   *wire.NodeState
}

func newSaver(store *statestore.Store, log *slog.Logger) *saver {
	s := &saver{store: store, log: log}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// offer queues st (which must not change afterwards) for saving.
func (s *saver) offer(epoch string, version uint64, st *wire.NodeState) {
	if s.store == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = &savedState{epoch, version, st}
	if !s.running {
		s.running = true
		go s.loop()
	}
}

func (s *saver) loop() {
	for {
		s.mu.Lock()
		p := s.pending
		s.pending = nil
		if p == nil {
			s.running = false
			s.idle.Broadcast()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.store.Save(p.epoch, p.version, p.state); err != nil {
			s.log.Error("saving received state", "err", err)
		}
	}
}

// flush waits until the latest offered state is on disk.
func (s *saver) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running {
		s.idle.Wait()
	}
}
