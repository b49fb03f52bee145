package hl7

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MLLP block characters (HL7 v2 Minimal Lower Layer Protocol, release 2):
// a frame is StartBlock, the payload, EndBlock, CarriageReturn.
const (
	StartBlock     byte = 0x0B
	EndBlock       byte = 0x1C
	CarriageReturn byte = 0x0D
)

// DefaultMaxFrameBytes bounds a frame's payload when NewFrameReader is given
// no positive bound.
const DefaultMaxFrameBytes = 1 << 20

// readBufferSize is the FrameReader's bufio buffer. A too-large frame is
// detected at most this many bytes after its payload crosses the bound.
const readBufferSize = 4096

var (
	// ErrFrameTooLarge is returned by FrameReader.ReadFrame when a frame's
	// payload grows beyond the reader's bound. The rest of the frame is not
	// read; the stream cannot be resynchronised, so the caller answers AR and
	// closes the connection.
	ErrFrameTooLarge = errors.New("hl7: MLLP frame too large")

	// ErrNotFramed is wrapped by the errors FrameReader returns when the
	// stream breaks MLLP framing: a byte other than CR or LF where a start
	// block is expected, a start block inside a frame, or an end block not
	// followed by CR. The stream cannot be resynchronised: the caller answers
	// with a NAK and closes the connection.
	ErrNotFramed = errors.New("hl7: not MLLP framed")

	// ErrUnframeable is wrapped by WriteFrame's error when the payload itself
	// contains a start or end block character, which MLLP cannot carry.
	ErrUnframeable = errors.New("hl7: payload contains an MLLP block character")
)

// FrameReader reads MLLP frames from a stream, one at a time, with a bound on
// the payload size. It buffers through a bufio.Reader and never reads the
// stream beyond what that buffer holds.
//
// Between frames it skips CR and LF (some senders end each frame with an
// extra newline). Errors:
//
//   - io.EOF: the stream ended cleanly between frames;
//   - io.ErrUnexpectedEOF: the stream ended inside a frame;
//   - ErrFrameTooLarge, or an error wrapping ErrNotFramed: a protocol error.
//     These are final: every later call returns the same error.
//
// Any other error comes from the underlying reader (a read deadline, say) and
// is not final: the bytes read so far are kept, and the next call resumes
// the frame where it stopped.
//
// A FrameReader is not safe for concurrent use.
type FrameReader struct {
	br      *bufio.Reader
	max     int
	started bool   // the current frame's start block has been read
	needCR  bool   // the end block has been read; its CR has not
	buf     []byte // the current frame's payload so far
	err     error  // final error, returned by every later call
}

// NewFrameReader returns a FrameReader over r whose frames may carry at most
// maxBytes of payload (DefaultMaxFrameBytes when maxBytes <= 0).
func NewFrameReader(r io.Reader, maxBytes int) *FrameReader {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFrameBytes
	}
	return &FrameReader{br: bufio.NewReaderSize(r, readBufferSize), max: maxBytes}
}

// StartFrame waits for the next frame's start block, skipping CR and LF, and
// consumes it. ReadFrame calls it when needed; a listener calls it directly
// to tell an idle connection (waiting for StartFrame) from a frame in
// progress (waiting for ReadFrame), and give each its own read deadline.
// It returns nil at once if a frame has already started.
func (f *FrameReader) StartFrame() error {
	if f.err != nil {
		return f.err
	}
	if f.started {
		return nil
	}
	for {
		c, err := f.br.ReadByte()
		if err != nil {
			if err == io.EOF {
				f.err = io.EOF
			}
			return err
		}
		switch c {
		case '\r', '\n':
			continue
		case StartBlock:
			f.started = true
			return nil
		default:
			f.err = fmt.Errorf("%w: byte 0x%02x where a start block (0x0B) was expected", ErrNotFramed, c)
			return f.err
		}
	}
}

// AwaitingCR reports whether the current frame's end block has been read and
// only the CR that must follow it is missing. A sender that ends its frames
// with 0x1C alone waits for an answer while the reader waits for the CR: a
// listener whose read deadline passes in that state can tell the sender why.
func (f *FrameReader) AwaitingCR() bool { return f.err == nil && f.needCR }

// EndedWithoutCR reports whether the stream ended (io.ErrUnexpectedEOF)
// right after the current frame's end block: the sender ended its frame
// with 0x1C alone and closed its side, and may still read an answer.
func (f *FrameReader) EndedWithoutCR() bool {
	return f.needCR && errors.Is(f.err, io.ErrUnexpectedEOF)
}

// ReadFrame reads the next frame and returns its payload, without the block
// characters. The returned slice belongs to the caller.
func (f *FrameReader) ReadFrame() ([]byte, error) {
	if err := f.StartFrame(); err != nil {
		return nil, err
	}
	for !f.needCR {
		chunk, err := f.br.ReadSlice(EndBlock)
		body := chunk
		if err == nil {
			body = chunk[:len(chunk)-1] // the end block
		}
		// A start block is reported if it comes before the bound is crossed.
		if i := bytes.IndexByte(body, StartBlock); i >= 0 && len(f.buf)+i <= f.max {
			f.err = fmt.Errorf("%w: start block (0x0B) inside a frame, at payload offset %d", ErrNotFramed, len(f.buf)+i)
			return nil, f.err
		}
		if len(f.buf)+len(body) > f.max {
			f.buf = nil
			f.err = fmt.Errorf("%w: payload exceeds %d bytes", ErrFrameTooLarge, f.max)
			return nil, f.err
		}
		f.buf = append(f.buf, body...)
		switch {
		case err == nil:
			f.needCR = true
		case errors.Is(err, bufio.ErrBufferFull):
			// The frame goes on beyond the buffer: read on.
		case err == io.EOF:
			f.err = io.ErrUnexpectedEOF
			return nil, f.err
		default:
			return nil, err // not final: resume on the next call
		}
	}
	c, err := f.br.ReadByte()
	if err != nil {
		if err == io.EOF {
			f.err = io.ErrUnexpectedEOF
			return nil, f.err
		}
		return nil, err
	}
	if c != CarriageReturn {
		f.err = fmt.Errorf("%w: end block (0x1C) followed by 0x%02x, not CR (0x0D)", ErrNotFramed, c)
		return nil, f.err
	}
	payload := f.buf
	if payload == nil {
		payload = []byte{}
	}
	f.buf, f.started, f.needCR = nil, false, false
	return payload, nil
}

// WriteFrame writes payload to w as one MLLP frame, in a single Write call.
// A payload holding a start or end block character cannot be framed: the
// error wraps ErrUnframeable and nothing is written.
func WriteFrame(w io.Writer, payload []byte) error {
	frame, err := AppendFrame(nil, payload)
	if err != nil {
		return err
	}
	_, err = w.Write(frame)
	return err
}

// AppendFrame appends payload, framed, to dst. The error wraps
// ErrUnframeable when payload holds a start or end block character.
func AppendFrame(dst, payload []byte) ([]byte, error) {
	if i := bytes.IndexAny(payload, "\x0b\x1c"); i >= 0 {
		return dst, fmt.Errorf("%w: byte 0x%02x at offset %d", ErrUnframeable, payload[i], i)
	}
	dst = append(dst, StartBlock)
	dst = append(dst, payload...)
	return append(dst, EndBlock, CarriageReturn), nil
}
