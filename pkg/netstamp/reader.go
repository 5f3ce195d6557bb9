package netstamp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Reader reads a TCP connection with the kernel's receive timestamps
// (SO_TIMESTAMPNS): each read returns the bytes, and Last says when the
// kernel stamped the last socket buffer it took them from. Use it
// instead of the connection for reading (writes go to the connection).
type Reader struct {
	rc  syscall.RawConn
	oob []byte
	// last is the kernel's stamp of the latest read that returned bytes,
	// zero when the kernel gave none: it stamps no segment that arrived
	// before the option was set, nor any until it has turned its receive
	// timestamps on (deferred to a worker when the first socket asks).
	last time.Time
}

// NewReader turns on the kernel's receive timestamps of nc, a
// *net.TCPConn (a unix stream socket gets none), for what arrives from
// now on.
func NewReader(nc net.Conn) (*Reader, error) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil, fmt.Errorf("netstamp: kernel receive timestamps need a TCP connection, not %T", nc)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("netstamp: SO_TIMESTAMPNS: %w", serr)
	}
	return &Reader{rc: rc, oob: make([]byte, unix.CmsgSpace(2*8)*2)}, nil
}

// Read reads what the socket holds, up to len(p), and records the
// kernel's stamp of it.
func (r *Reader) Read(p []byte) (int, error) {
	var n, oobn int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, r.oob, 0)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	cmsgs, err := unix.ParseSocketControlMessage(r.oob[:oobn])
	if err != nil {
		return 0, fmt.Errorf("netstamp: receive timestamp: %w", err)
	}
	r.last = time.Time{}
	for _, m := range cmsgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
			// struct timespec: two native 64-bit words on the 64-bit
			// platforms this runs on.
			sec, nsec := binary.NativeEndian.Uint64(m.Data[0:8]), binary.NativeEndian.Uint64(m.Data[8:16])
			r.last = time.Unix(int64(sec), int64(nsec))
		}
	}
	return n, nil
}

// Last is the kernel's receive stamp of what the latest Read returned:
// of the last socket buffer it took bytes from (or of a later one the
// kernel merged into it before the read: never earlier). Reading exactly
// a message's bytes, it is when the message's end arrived. Zero when the
// kernel gave none.
func (r *Reader) Last() time.Time { return r.last }
