package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// readmeMarker precedes each block of the README that the real-cluster
// tests run verbatim: `<!-- run by test/cluster: NAME -->`, then a fenced
// shell block.
const readmeMarker = "<!-- run by test/cluster: "

// READMEBlock returns the command lines of the block NAME of the Markdown
// file doc (relative to the repository root; comments and blank lines
// dropped), so that what the tests run is what the documentation tells a
// user.
func READMEBlock(repoRoot, doc, name string) ([]string, error) {
	f, err := os.Open(filepath.Join(repoRoot, doc))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	want := readmeMarker + name + " -->"
	state := 0 // 0: looking for the marker, 1: for the fence, 2: in the block
	var lines []string
	for s.Scan() {
		line := s.Text()
		switch state {
		case 0:
			if strings.TrimSpace(line) == want {
				state = 1
			}
		case 1:
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				state = 2
			} else if strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("%s: %q is not followed by a fenced block", doc, want)
			}
		case 2:
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				if len(lines) == 0 {
					return nil, fmt.Errorf("%s: block %q is empty", doc, name)
				}
				return lines, nil
			}
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				lines = append(lines, t)
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s has no complete block %q (marker %s)", doc, name, want)
}

// RunREADMEBlock runs the block NAME of README.md line by line with bash
// in the repository root, with the cluster's environment (KUBECONFIG,
// kubectl on PATH) plus env, and returns the combined output. It stops at
// the first failing line.
func (c *Cluster) RunREADMEBlock(ctx context.Context, repoRoot, name string, env ...string) (string, error) {
	return c.RunDocBlock(ctx, repoRoot, "README.md", name, env...)
}

// RunDocBlock is RunREADMEBlock for the Markdown file doc.
func (c *Cluster) RunDocBlock(ctx context.Context, repoRoot, doc, name string, env ...string) (string, error) {
	lines, err := READMEBlock(repoRoot, doc, name)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	for _, line := range lines {
		fmt.Fprintf(&out, "$ %s\n", line)
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+c.BinDir+":"+os.Getenv("PATH"))
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("%s block %q: %s: %w", doc, name, line, err)
		}
	}
	return out.String(), nil
}

// InstallTierflow installs tierflow as the README tells a user, running
// its blocks "images", "load" and "install" verbatim: the images built on
// this machine (with the offline stand-ins for the Dockerfiles' bases),
// loaded into every node, the userspace-datapath variant of the release
// manifest applied, and both rollouts complete.
func (c *Cluster) InstallTierflow(ctx context.Context, repoRoot string, logf func(string, ...any)) error {
	env := []string{"BASE_IMAGE=" + BaseImage, "GO_IMAGE=" + GoImage, "CLUSTER_DIR=" + c.Dir}
	// The images' tags are the README's, the same in every checkout, and
	// Docker is this machine's: another checkout's test must not retag
	// them between our build and our load into the nodes (which keep
	// their own copies).
	unlock, err := Lock(imagesLock)
	if err != nil {
		return err
	}
	defer unlock()
	for _, block := range []string{"images", "load", "install"} {
		start := time.Now()
		out, err := c.RunREADMEBlock(ctx, repoRoot, block, env...)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, tail(out, 40))
		}
		if logf != nil {
			logf("README block %q: %v", block, time.Since(start).Round(time.Second))
		}
		if block == "load" {
			unlock()
		}
	}
	return nil
}

// imagesLock is the Lock name held from building tierflow's images to
// loading them into the nodes.
const imagesLock = "images"
