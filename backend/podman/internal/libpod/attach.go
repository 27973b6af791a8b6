package libpod

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Attachment is a container's attach stream, on a connection of its own
// that the service took over (HTTP/1.1 upgrade): what is written goes to
// the container's stdin; what the container writes comes multiplexed
// (see [Attachment.Demux]).
type Attachment struct {
	conn net.Conn
	r    *bufio.Reader
}

// Attach attaches to the container's stdin, stdout and stderr, before or
// after it started, and returns once the service has taken the connection
// over. ctx bounds the attaching only, not the stream.
func (c *Client) Attach(ctx context.Context, id string) (*Attachment, error) {
	q := url.Values{"stream": {"true"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
	req, err := c.request(ctx, http.MethodPost, path("/containers/%s/attach", id), q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	conn, err := c.dialRetry(ctx)
	if err != nil {
		return nil, err
	}
	// Cancelling ctx interrupts the request and the wait for its answer.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	a, err := upgrade(conn, req)
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return a, nil
}

// upgrade sends req on conn and reads the answer: the connection, taken
// over, or the service's error.
func upgrade(conn net.Conn, req *http.Request) (*Attachment, error) {
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if err := process(resp, nil); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("incorrect server response code %d, expected %d", resp.StatusCode, http.StatusSwitchingProtocols)
	}
	return &Attachment{conn: conn, r: r}, nil
}

// Write writes p to the container's stdin.
func (a *Attachment) Write(p []byte) (int, error) { return a.conn.Write(p) }

// CloseWrite ends the container's stdin; its output goes on.
func (a *Attachment) CloseWrite() error {
	if cw, ok := a.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection, which ends the stream.
func (a *Attachment) Close() error { return a.conn.Close() }

// ErrLostSync: the stream is not Docker's multiplexed framing.
var ErrLostSync = errors.New("lost synchronization with multiplexed stream")

// Demux reads the stream until it ends and writes what the container
// wrote, in order: stdout's frames (stream 1, and 0) to stdout, stderr's
// (2) to stderr. Each frame is an 8-byte header (the stream; three zero
// bytes; the length, 32 bits big-endian) and its bytes. A frame of stream
// 3 is the service's error. Its end between frames is nil.
func (a *Attachment) Demux(stdout, stderr io.Writer) error {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(a.r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		var dst io.Writer
		switch hdr[0] {
		case 0, 1:
			dst = stdout
		case 2:
			dst = stderr
		case 3:
			msg := make([]byte, n)
			if _, err := io.ReadFull(a.r, msg); err != nil {
				return err
			}
			return fmt.Errorf("from service from stream: %s", msg)
		default:
			return fmt.Errorf(`channel "%d" found, 0-3 supported: %w`, hdr[0], ErrLostSync)
		}
		m, err := io.CopyBuffer(dst, io.LimitReader(a.r, n), buf)
		if err != nil {
			return err
		}
		if m < n {
			return io.ErrUnexpectedEOF
		}
	}
}
