package cniinstall

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tierflow/tierflow/pkg/config"
)

// Uninstall removes what Install put on the node: the configuration list,
// tierflow-cni, and each helper plugin that is tierflow's own copy (the
// same bytes as sourceDir's: a node's own host-local or loopback, which
// Install never replaces, stays). It returns the paths it removed; a
// second call removes nothing and succeeds.
func Uninstall(agent *config.Agent, sourceDir string) ([]string, error) {
	var removed []string
	var errs []error
	remove := func(path string) {
		err := os.Remove(path)
		switch {
		case err == nil:
			removed = append(removed, path)
		case !errors.Is(err, os.ErrNotExist):
			errs = append(errs, err)
		}
	}
	// The configuration first: from then on the runtime sets up no pod
	// with tierflow-cni.
	remove(filepath.Join(agent.CNI.ConfDir, ConflistName))
	remove(filepath.Join(agent.CNI.BinDir, PluginName))
	for _, name := range helperPlugins {
		installed := filepath.Join(agent.CNI.BinDir, name)
		ours, err := sameContent(installed, filepath.Join(sourceDir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ours {
			remove(installed)
		}
	}
	return removed, errors.Join(errs...)
}

// sameContent reports whether the node's file a exists and has the bytes
// of tierflow's copy b.
func sameContent(a, b string) (bool, error) {
	node, err := os.ReadFile(a)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ours, err := os.ReadFile(b)
	if err != nil {
		return false, fmt.Errorf("tierflow's copy of %s: %w", filepath.Base(a), err)
	}
	return bytes.Equal(node, ours), nil
}
