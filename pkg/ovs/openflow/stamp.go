package openflow

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

// stampedReader reads a TCP connection with the kernel's receive
// timestamps (SO_TIMESTAMPNS): each read returns the bytes and the time
// the kernel stamped the last socket buffer it took them from. On
// loopback the kernel stamps a segment as the sender's send call hands
// it to the loopback device (netif_rx), so the stamp is when the peer
// sent the bytes, not when this process got round to reading them.
// Unix stream sockets carry no such stamp, hence TCP only.
type stampedReader struct {
	rc  syscall.RawConn
	oob []byte
	// last is the kernel's stamp of the latest read that returned bytes,
	// zero when the kernel gave none: it stamps no segment that arrived
	// before the option was set, nor any until it has turned its receive
	// timestamps on (deferred to a worker when the first socket asks).
	last time.Time
}

func newStampedReader(nc net.Conn) (*stampedReader, error) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil, fmt.Errorf("kernel receive timestamps need a TCP connection, not %T", nc)
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
		return nil, fmt.Errorf("SO_TIMESTAMPNS: %w", serr)
	}
	return &stampedReader{rc: rc, oob: make([]byte, unix.CmsgSpace(2*8)*2)}, nil
}

// Read reads what the socket holds, up to len(p), and records the
// kernel's stamp of it.
func (r *stampedReader) Read(p []byte) (int, error) {
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
		return 0, fmt.Errorf("receive timestamp: %w", err)
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

// readStamped reads one framed message and returns it with the kernel's
// stamp of its last bytes (zero if the kernel gave none): reading exactly the message's bytes, the last
// read takes them from the socket buffer that brought the message's end
// (or a later one merged into it before this read: never earlier).
func (r *stampedReader) readStamped() ([]byte, time.Time, error) {
	msg, err := readMsg(r)
	return msg, r.last, err
}
