package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQuerySocketNeverWider: the query socket has no authentication of its
// own, so its path must never name a socket others may connect to, not
// even between listen and chmod. The test watches the socket's directory
// with inotify while the socket is created (fresh, and over a stale one):
// the name must appear by a rename (IN_MOVED_TO) of a socket that already
// has mode 0600, and never be created in place (IN_CREATE) or have its
// mode changed afterwards (IN_ATTRIB). A file that is not a socket is
// never replaced.
func TestQuerySocketNeverWider(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"fresh", "over a stale socket"} {
		ln, err := listenUnix(path)
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %s has mode %v, want a socket with 0600", run, path, fi.Mode())
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("%s: the socket does not answer: %v", run, err)
		}
		c.Close()
		var got []string
		for _, ev := range inotifyEvents(t, fd) {
			if ev.name == filepath.Base(path) {
				got = append(got, ev.what)
			}
		}
		if strings.Join(got, ",") != "moved-to" {
			t.Fatalf("%s: events on %s: %v, want only moved-to (created elsewhere with its mode, renamed into place)", run, path, got)
		}
		// A stale socket of an earlier run stays behind: close without
		// removing it (as a crashed agent would).
		ln.Close()
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %v, want the socket only (no staging directory left)", entries)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := listenUnix(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listening over a regular file: %v, want refused", err)
	}
}

type inotifyEvent struct{ name, what string }

func inotifyEvents(t *testing.T, fd int) []inotifyEvent {
	var out []inotifyEvent
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			var ev unix.InotifyEvent
			if err := binary.Read(bytes.NewReader(buf[off:off+unix.SizeofInotifyEvent]), binary.NativeEndian, &ev); err != nil {
				t.Fatal(err)
			}
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
			what := ""
			switch {
			case ev.Mask&unix.IN_CREATE != 0:
				what = "create"
			case ev.Mask&unix.IN_MOVED_TO != 0:
				what = "moved-to"
			case ev.Mask&unix.IN_ATTRIB != 0:
				what = "attrib"
			}
			out = append(out, inotifyEvent{name, what})
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
