package statestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// FormatVersion is the version of the file layout this package writes.
// Version 2 added the node's pods (wire.NodeState.Pods): a version 1 file
// would admit no pod, so it is refused like any unknown version, and an
// upgraded agent keeps the previous run's flows until the controller's
// state arrives.
const FormatVersion = 2

// FileName is the state file's name inside the store's directory.
const FileName = "policy-state.json"

// Saved is what the store holds.
type Saved struct {
	FormatVersion int `json:"formatVersion"`
	// Epoch and Version identify the controller stream the state came
	// from, so the agent can resume it.
	Epoch   string          `json:"epoch"`
	Version uint64          `json:"version"`
	SavedAt time.Time       `json:"savedAt"`
	State   *wire.NodeState `json:"state"`
}

// Store reads and writes the state file in one directory.
type Store struct {
	dir string
}

// Open returns a store in dir, creating the directory (mode 0700: the
// state reveals the cluster's policies) if needed.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Path is the state file's path.
func (s *Store) Path() string { return filepath.Join(s.dir, FileName) }

// Load returns the saved state, or (nil, nil) when there is none.
func (s *Store) Load() (*Saved, error) {
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	var sv Saved
	if err := json.Unmarshal(b, &sv); err != nil {
		return nil, fmt.Errorf("state store: %s is corrupt: %w", s.Path(), err)
	}
	if sv.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("state store: %s has format version %d, this agent reads %d", s.Path(), sv.FormatVersion, FormatVersion)
	}
	if sv.State == nil {
		return nil, fmt.Errorf("state store: %s holds no state", s.Path())
	}
	if sv.State.Policies == nil || sv.State.AppliedToGroups == nil || sv.State.AddressGroups == nil {
		fresh := wire.NewNodeState(sv.State.Node)
		for k, v := range sv.State.Policies {
			fresh.Policies[k] = v
		}
		for k, v := range sv.State.AppliedToGroups {
			fresh.AppliedToGroups[k] = v
		}
		for k, v := range sv.State.AddressGroups {
			fresh.AddressGroups[k] = v
		}
		sv.State = fresh
	}
	return &sv, nil
}

// Save replaces the saved state atomically.
func (s *Store) Save(epoch string, version uint64, st *wire.NodeState) error {
	b, err := json.Marshal(&Saved{FormatVersion: FormatVersion, Epoch: epoch, Version: version, SavedAt: time.Now().UTC(), State: st})
	if err != nil {
		return fmt.Errorf("state store: encoding: %w", err)
	}
	tmp, err := os.CreateTemp(s.dir, FileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("state store: writing: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("state store: syncing: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.Path()); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	// Make the rename itself durable.
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
