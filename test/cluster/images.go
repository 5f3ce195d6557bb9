package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/tierflow/tierflow/test/cluster/node"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// Images the cluster builds: nothing can be pulled where it runs, so every
// image comes from Debian packages (mmdebstrap) and Go modules.
const (
	// BaseImage and GoImage stand in for debian:13.2-slim and
	// golang:1.26.8-trixie, the public bases of tierflow's Dockerfiles:
	// `make images BASE_IMAGE=... GO_IMAGE=...` on a machine that cannot
	// pull them (`make base-images` builds both).
	BaseImage = "tierflow.local/debian:trixie"
	GoImage   = "tierflow.local/golang:1.26.8-trixie"
	// PauseImage is every node containerd's sandbox_image.
	PauseImage = "tierflow.local/pause:3.10"
	// CoreDNSImage runs the cluster DNS (build/coredns).
	CoreDNSImage = "tierflow.local/coredns:v1.15.0"
	nodeBaseRepo = "tierflow.local/node-base"
	nodeRepo     = "tierflow.local/node"
	contentLabel = "tierflow.content"
)

// AgnhostImages are the agnhost tags the suites run against the cluster
// name (network-policy-api v0.1.7/v0.2.0: 2.45; cyclonus: 2.43; tierflow's
// e2e workloads: 2.53); all are the agnhost of k8s.io/kubernetes v1.31.4.
var AgnhostImages = []string{
	"registry.k8s.io/e2e-test-images/agnhost:2.43",
	"registry.k8s.io/e2e-test-images/agnhost:2.45",
	"registry.k8s.io/e2e-test-images/agnhost:2.53",
}

// CyclonusWorkerImage is the image cyclonus's batch prober gives its pods
// (test/cyclonus/cmd/cyclonus-batch): the agnhost image with
// test/cyclonus/cmd/cyclonus-worker as /worker, which runs a batch of
// `agnhost connect` inside the pod.
const CyclonusWorkerImage = "mfenwick100/cyclonus-worker:latest"

// nodePackages are the Debian (bookworm) packages of a node: the container
// runtime, what the kubelet and kube-proxy call (iptables, conntrack,
// mount, nsenter), the control plane's etcd, and tini as init.
var nodePackages = []string{
	"containerd", "runc", "tini", "iptables", "nftables", "iproute2", "conntrack", "ethtool",
	"kmod", "procps", "psmisc", "util-linux", "mount", "ca-certificates", "curl", "socat", "etcd-server",
}

// BinDir holds the binaries the images are made of; Binaries lists what
// must be there (`make cluster-prereqs` builds them).
var Binaries = []string{
	"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy",
	"agnhost", "agnhost-wrapper", "coredns", "pause", "cyclonus-worker",
}

// imageBuilder builds the cluster's images with docker, in a scratch
// directory for build contexts.
type imageBuilder struct {
	binDir  string
	scratch string
	logf    func(format string, args ...any)
}

// ensureAll builds every image the cluster runs that is missing or stale
// and returns the node image's tag.
func (b *imageBuilder) ensureAll(ctx context.Context) (string, error) {
	nodeBase, err := b.debootstrap(ctx, nodeBaseRepo, "bookworm", nodePackages)
	if err != nil {
		return "", err
	}
	if _, err := b.ensureBase(ctx); err != nil {
		return "", err
	}
	nodeImage, err := b.build(ctx, []string{nodeRepo}, true,
		"FROM "+nodeBase+"\n"+
			"COPY bin/ /usr/local/bin/\n"+
			"COPY containerd.toml /etc/containerd/config.toml\n"+
			"COPY entrypoint.sh /usr/local/sbin/tierflow-node-init\n"+
			"ENTRYPOINT [\"/usr/bin/tini\", \"-g\", \"--\", \"/usr/local/sbin/tierflow-node-init\"]\n",
		map[string]string{
			"bin/kube-apiserver":          filepath.Join(b.binDir, "kube-apiserver"),
			"bin/kube-controller-manager": filepath.Join(b.binDir, "kube-controller-manager"),
			"bin/kube-scheduler":          filepath.Join(b.binDir, "kube-scheduler"),
			"bin/kubectl":                 filepath.Join(b.binDir, "kubectl"),
			"bin/kubelet":                 filepath.Join(b.binDir, "kubelet"),
			"bin/kube-proxy":              filepath.Join(b.binDir, "kube-proxy"),
		}, map[string][]byte{
			"containerd.toml": node.ContainerdConfig,
			"entrypoint.sh":   node.Entrypoint,
		})
	if err != nil {
		return "", err
	}
	if _, err := b.build(ctx, []string{PauseImage}, false,
		"FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n",
		map[string]string{"pause": filepath.Join(b.binDir, "pause")}, nil); err != nil {
		return "", err
	}
	// /agnhost is cmd/agnhost-wrapper, which runs the real agnhost (it
	// only keeps porter from failing on SCTP ports where the kernel has
	// no SCTP).
	agnhostFiles := map[string]string{"agnhost": filepath.Join(b.binDir, "agnhost"), "agnhost-wrapper": filepath.Join(b.binDir, "agnhost-wrapper")}
	const agnhostDockerfile = "FROM " + BaseImage + "\nCOPY agnhost /usr/local/lib/agnhost/agnhost\nCOPY agnhost-wrapper /agnhost\n" +
		"ENTRYPOINT [\"/agnhost\"]\nCMD [\"pause\"]\n"
	if _, err := b.build(ctx, AgnhostImages, false, agnhostDockerfile, agnhostFiles, nil); err != nil {
		return "", err
	}
	agnhostFiles["worker"] = filepath.Join(b.binDir, "cyclonus-worker")
	if _, err := b.build(ctx, []string{CyclonusWorkerImage}, false,
		agnhostDockerfile+"COPY worker /worker\n", agnhostFiles, nil); err != nil {
		return "", err
	}
	if _, err := b.build(ctx, []string{CoreDNSImage}, false,
		"FROM "+BaseImage+"\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT [\"/coredns\"]\n",
		map[string]string{"coredns": filepath.Join(b.binDir, "coredns")}, nil); err != nil {
		return "", err
	}
	return nodeImage, nil
}

// ensureBase builds BaseImage (Debian trixie, minbase, CA certificates) and
// GoImage (BaseImage with this machine's Go toolchain, tierflow's modules
// and its dependencies compiled) if missing or stale.
func (b *imageBuilder) ensureBase(ctx context.Context) (string, error) {
	base, err := b.debootstrap(ctx, "", "trixie", []string{"ca-certificates"})
	if err != nil {
		return "", err
	}
	goroot, err := command(ctx, nil, "go", "env", "GOROOT")
	if err != nil {
		return "", err
	}
	version, err := os.ReadFile(filepath.Join(goroot, "VERSION"))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(string(version), "go1.26.8") {
		return "", fmt.Errorf("%s is %s; %s needs go1.26.8 (the toolchain tierflow's go.mod names)", goroot, firstLine(string(version)), GoImage)
	}
	warm, err := warmBuildInputs(ctx)
	if err != nil {
		return "", err
	}
	// The builder fetches modules from the Go module proxy, through
	// whatever this machine's network does to TLS (here an intercepting
	// egress proxy): it trusts what this machine trusts.
	//
	// Unlike the public image, the stand-in comes with the modules of
	// tierflow's go.mod downloaded and the packages the Dockerfiles build
	// from them compiled (with the Dockerfiles' flags) in its Go build
	// cache: `make images` then compiles tierflow's own packages only.
	// The image is rebuilt when go.mod or go.sum change, not when the
	// code imports another package (the Dockerfiles' build compiles what
	// the list lacks); the binaries are the same either way.
	_, err = b.build(ctx, []string{GoImage}, false,
		"FROM "+base+"\nCOPY go/ /usr/local/go/\n"+
			"COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"+
			"ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOPATH=/go GOTOOLCHAIN=local\n"+
			"COPY warm/ /warm/\n"+
			"RUN cd /warm && go mod download && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath $(cat packages.txt) && rm -rf /warm\n"+
			"WORKDIR /go\n",
		map[string]string{"go": goroot, "ca-certificates.crt": hostCABundle}, warm, warmPackageList)
	return base, err
}

// warmPackageList is GoImage's list of packages to compile.
const warmPackageList = "warm/packages.txt"

// dockerfilePackages are what build/*/Dockerfile compile (their builder
// stage, identical in both).
var dockerfilePackages = []string{
	"./cmd/tierflow-controller", "./cmd/tierflow-agent", "./cmd/tierflow-install-cni", "./cmd/tierctl", "./cmd/tierflow-cni",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
	"github.com/containernetworking/plugins/plugins/main/loopback",
}

// warmBuildInputs are GoImage's warm-up files: tierflow's go.mod and
// go.sum, and packages.txt, every package outside tierflow that the
// Dockerfiles' binaries import (standard library included).
func warmBuildInputs(ctx context.Context) (map[string][]byte, error) {
	root, err := kubeapi.RepoRoot()
	if err != nil {
		return nil, err
	}
	blobs := map[string][]byte{}
	for _, f := range []string{"go.mod", "go.sum"} {
		if blobs["warm/"+f], err = os.ReadFile(filepath.Join(root, f)); err != nil {
			return nil, err
		}
	}
	list := exec.CommandContext(ctx, "go", append([]string{"list", "-deps"}, dockerfilePackages...)...)
	list.Dir = root
	list.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps of the Dockerfiles' packages: %w", err)
	}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/tierflow/tierflow") {
			deps = append(deps, p)
		}
	}
	blobs[warmPackageList] = []byte(strings.Join(deps, "\n") + "\n")
	return blobs, nil
}

// hostCABundle is Debian's bundle of this machine's trusted CAs.
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// debootstrap makes an image of Debian suite with packages (mmdebstrap,
// variant minbase) unless it exists. repo "" means BaseImage; otherwise the
// tag is repo:<hash of suite and packages>.
func (b *imageBuilder) debootstrap(ctx context.Context, repo, suite string, packages []string) (string, error) {
	sum := sha256.Sum256([]byte(suite + "\n" + strings.Join(packages, ",")))
	tag := repo + ":" + hex.EncodeToString(sum[:6])
	if repo == "" {
		tag = BaseImage
	}
	if imageExists(ctx, tag) {
		return tag, nil
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", fmt.Errorf("building %s needs mmdebstrap: install it (make cluster-prereqs does)", tag)
	}
	b.logf("building %s from Debian %s packages (mmdebstrap)", tag, suite)
	if err := os.MkdirAll(b.scratch, 0o755); err != nil {
		return "", err
	}
	tarball := filepath.Join(b.scratch, "rootfs-"+suite+".tar")
	defer os.Remove(tarball)
	args := []string{"--variant=minbase", "--quiet",
		// As the slim images do: no documentation or locales.
		"--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/doc/*/copyright"}
	if len(packages) > 0 {
		args = append(args, "--include="+strings.Join(packages, ","))
	}
	args = append(args, suite, tarball)
	if _, err := command(ctx, nil, "mmdebstrap", args...); err != nil {
		return "", fmt.Errorf("mmdebstrap (needs deb.debian.org): %w", err)
	}
	if _, err := docker(ctx, "import", tarball, tag); err != nil {
		return "", err
	}
	return tag, nil
}

func imageExists(ctx context.Context, tag string) bool {
	_, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", tag)
	return err == nil
}

// build builds an image from dockerfile and a context of files (context
// path → path on this machine, a file or a directory) and inline blobs,
// tagging it with every name in tags. The image carries a hash of its
// inputs (but for the blobs named unhashed): an image with the same hash
// is reused. With hashTag the first tag is a repository that gets the
// hash as its tag, and that tag is returned.
func (b *imageBuilder) build(ctx context.Context, tags []string, hashTag bool, dockerfile string, files map[string]string, blobs map[string][]byte, unhashed ...string) (string, error) {
	for _, src := range files {
		if _, err := os.Stat(src); err != nil {
			return "", fmt.Errorf("image %s: %w", tags[0], err)
		}
	}
	hashed := map[string][]byte{}
	for name, content := range blobs {
		if !slices.Contains(unhashed, name) {
			hashed[name] = content
		}
	}
	hash, err := contentHash(dockerfile, files, hashed)
	if err != nil {
		return "", err
	}
	if hashTag {
		tags = append([]string{tags[0] + ":" + hash[:12]}, tags[1:]...)
	}
	if labelOf(ctx, tags) == hash {
		return tags[0], nil
	}
	b.logf("building %s", strings.Join(tags, ", "))
	if err := os.MkdirAll(b.scratch, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(b.scratch, "context-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	for dst, src := range files {
		target := filepath.Join(dir, dst)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return "", err
		}
		// Hard links when the scratch directory shares the file system;
		// a copy otherwise.
		if _, err := command(ctx, nil, "cp", "-al", src, target); err != nil {
			if _, err := command(ctx, nil, "cp", "-a", src, target); err != nil {
				return "", err
			}
		}
	}
	blobs = withDockerfile(blobs, dockerfile)
	for name, content := range blobs {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o755); err != nil {
			return "", err
		}
	}
	args := []string{"build", "--quiet", "--label", contentLabel + "=" + hash}
	for _, t := range tags {
		args = append(args, "-t", t)
	}
	if _, err := docker(ctx, append(args, dir)...); err != nil {
		return "", err
	}
	if hashTag {
		b.removeOtherTags(ctx, tags[0])
	}
	return tags[0], nil
}

// removeOtherTags removes the images of ref's repository with other tags
// (earlier content): they would pile up. One still in use (a running
// cluster's node image) stays.
func (b *imageBuilder) removeOtherTags(ctx context.Context, ref string) {
	repo, tag, _ := strings.Cut(ref, ":")
	out, err := docker(ctx, "images", repo, "--format", "{{.Tag}}")
	if err != nil {
		return
	}
	for _, t := range strings.Fields(out) {
		if t != tag {
			_, _ = docker(ctx, "rmi", repo+":"+t)
		}
	}
}

func withDockerfile(blobs map[string][]byte, dockerfile string) map[string][]byte {
	out := map[string][]byte{"Dockerfile": []byte(dockerfile)}
	for k, v := range blobs {
		out[k] = v
	}
	return out
}

// labelOf returns the content label all tags share, or "" when any is
// missing or they differ.
func labelOf(ctx context.Context, tags []string) string {
	label := ""
	for i, t := range tags {
		l, err := docker(ctx, "image", "inspect", "--format", "{{index .Config.Labels \""+contentLabel+"\"}}", t)
		if err != nil || (i > 0 && l != label) {
			return ""
		}
		label = l
	}
	return label
}

// contentHash hashes the Dockerfile, every blob and every file (a
// directory by its files' paths, sizes and modification times: GOROOT is
// large and changes only as a whole).
func contentHash(dockerfile string, files map[string]string, blobs map[string][]byte) (string, error) {
	h := sha256.New()
	io.WriteString(h, dockerfile)
	for _, name := range sortedKeys(blobs) {
		fmt.Fprintf(h, "\x00blob %s %x", name, sha256.Sum256(blobs[name]))
	}
	for _, dst := range sortedKeys(files) {
		src := files[dst]
		fmt.Fprintf(h, "\x00file %s ", dst)
		st, err := os.Stat(src)
		if err != nil {
			return "", err
		}
		if !st.IsDir() {
			f, err := os.Open(src)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", err
			}
			continue
		}
		err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// BuildBaseImages builds BaseImage and GoImage (if missing) for `make
// images` on a machine that cannot pull tierflow's Dockerfile bases.
func BuildBaseImages(ctx context.Context, scratch string, logf func(string, ...any)) (base, goImage string, err error) {
	holdDocker()
	if !dockerReachable(ctx) {
		return "", "", fmt.Errorf("no Docker daemon reachable (make cluster-up starts one)")
	}
	b := &imageBuilder{scratch: scratch, logf: logf}
	if _, err := b.ensureBase(ctx); err != nil {
		return "", "", err
	}
	return BaseImage, GoImage, nil
}
