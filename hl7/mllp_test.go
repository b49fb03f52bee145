package hl7

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

// frame returns payload framed by MLLP.
func frame(payload string) string { return "\x0b" + payload + "\x1c\r" }

// readAll reads frames until an error and returns them with that error.
func readAll(r io.Reader, max int) ([]string, error) {
	fr := NewFrameReader(r, max)
	var out []string
	for {
		p, err := fr.ReadFrame()
		if err != nil {
			return out, err
		}
		out = append(out, string(p))
	}
}

func TestReadFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		wantErr error // errors.Is target
	}{
		{"empty stream", "", 100, nil, io.EOF},
		{"only whitespace", "\r\n\r\n", 100, nil, io.EOF},
		{"one frame", frame("MSH|a"), 100, []string{"MSH|a"}, io.EOF},
		{"empty payload", frame(""), 100, []string{""}, io.EOF},
		{"two frames", frame("A") + frame("B"), 100, []string{"A", "B"}, io.EOF},
		{"whitespace between and around", "\n" + frame("A") + "\r\n" + frame("B") + "\n", 100, []string{"A", "B"}, io.EOF},
		{"payload with CR LF inside", frame("MSH|1\rPID|2\n"), 100, []string{"MSH|1\rPID|2\n"}, io.EOF},
		{"exactly max", frame("12345"), 5, []string{"12345"}, io.EOF},
		{"one over max", frame("123456"), 5, nil, ErrFrameTooLarge},
		{"second frame too large", frame("123") + frame("123456"), 5, []string{"123"}, ErrFrameTooLarge},
		{"garbage first", "MSH|no framing", 100, nil, ErrNotFramed},
		{"garbage between frames", frame("A") + "x" + frame("B"), 100, []string{"A"}, ErrNotFramed},
		{"space between frames", frame("A") + " " + frame("B"), 100, []string{"A"}, ErrNotFramed},
		{"start block inside frame", "\x0bAB\x0bCD\x1c\r", 100, nil, ErrNotFramed},
		{"end block without CR", "\x0bAB\x1cX", 100, nil, ErrNotFramed},
		{"end block then start block", "\x0bAB\x1c\x0bCD\x1c\r", 100, nil, ErrNotFramed},
		{"EOF after start block", "\x0b", 100, nil, io.ErrUnexpectedEOF},
		{"EOF mid payload", "\x0bMSH|", 100, nil, io.ErrUnexpectedEOF},
		{"EOF before CR", "\x0bMSH|\x1c", 100, nil, io.ErrUnexpectedEOF},
		{"EOF mid second frame", frame("A") + "\x0bB", 100, []string{"A"}, io.ErrUnexpectedEOF},
		{"default bound", frame(strings.Repeat("x", DefaultMaxFrameBytes)), 0, []string{strings.Repeat("x", DefaultMaxFrameBytes)}, io.EOF},
		{"default bound crossed", frame(strings.Repeat("x", DefaultMaxFrameBytes+1)), -1, nil, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The same stream, whole and one byte per Read.
			for _, r := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				got, err := readAll(r, tt.max)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
					t.Fatalf("frames = %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestReadFrameErrorsAreFinal(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"junk" + frame("A"), frame("123456") + frame("A"), "\x0bA\x1cX" + frame("B")} {
		fr := NewFrameReader(strings.NewReader(in), 5)
		_, err1 := fr.ReadFrame()
		_, err2 := fr.ReadFrame()
		err3 := fr.StartFrame()
		if err1 == nil || err1 != err2 || err2 != err3 {
			t.Errorf("%q: errors %v, %v, %v: want the same protocol error every time", in, err1, err2, err3)
		}
	}
}

func TestReadFrameErrorMessages(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"\r\nMSH":           "byte 0x4d where a start block (0x0B) was expected",
		"\x0bAB\x0bC":       "start block (0x0B) inside a frame, at payload offset 2",
		"\x0bAB\x1c\n":      "end block (0x1C) followed by 0x0a, not CR (0x0D)",
		frame("1234567890"): "payload exceeds 5 bytes",
	} {
		_, err := NewFrameReader(strings.NewReader(in), 5).ReadFrame()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to say %q", in, err, want)
		}
	}
}

// chunkReader returns at most the next size(i) bytes on the i-th Read.
type chunkReader struct {
	data []byte
	i    int
	size func(i int) int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), max(c.size(c.i), 1))
	c.i++
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestReadFrameStreaming(t *testing.T) {
	t.Parallel()
	adt, err := os.ReadFile("testdata/adt_a01.hl7")
	if err != nil {
		t.Fatal(err)
	}
	oru, err := os.ReadFile("testdata/oru_r01.hl7")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("OBX|1|TX|||"+strings.Repeat("z", 100)+"\r"), 200) // ~23 KB: spans many buffers
	payloads := [][]byte{adt, oru, {}, big, adt}
	var stream []byte
	for i, p := range payloads {
		stream, _ = AppendFrame(stream, p)
		if i%2 == 0 {
			stream = append(stream, "\r\n"...)
		}
	}
	sizes := map[string]func(int) int{
		"1 byte":       func(int) int { return 1 },
		"3 bytes":      func(int) int { return 3 },
		"primes":       func(i int) int { return []int{2, 3, 5, 7, 11, 13, 17, 19, 23}[i%9] },
		"around 4 KiB": func(i int) int { return 4095 + i%3 },
		"large":        func(int) int { return 1 << 16 },
	}
	for name, size := range sizes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fr := NewFrameReader(&chunkReader{data: stream, size: size}, 64<<10)
			for i, want := range payloads {
				got, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
				}
			}
			if _, err := fr.ReadFrame(); err != io.EOF {
				t.Fatalf("after the last frame: %v, want io.EOF", err)
			}
		})
	}
}

// countingReader serves an endless frame and counts the bytes it served.
type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		p[0] = StartBlock
		c.n = 1
		return 1, nil
	}
	for i := range p {
		p[i] = 'x'
	}
	c.n += len(p)
	return len(p), nil
}

func TestReadFrameTooLargeStopsReading(t *testing.T) {
	t.Parallel()
	src := &countingReader{}
	const limit = 100_000
	_, err := NewFrameReader(src, limit).ReadFrame()
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("error = %v, want ErrFrameTooLarge", err)
	}
	if src.n > limit+2*readBufferSize {
		t.Fatalf("read %d bytes of an endless frame bounded at %d: the reader must stop at the bound", src.n, limit)
	}
}

// flakyReader fails once with errTransient after serving half its data.
type flakyReader struct {
	data   []byte
	failAt int
	failed bool
}

var errTransient = errors.New("i/o timeout")

func (f *flakyReader) Read(p []byte) (int, error) {
	if !f.failed && f.failAt <= 0 {
		f.failed = true
		return 0, errTransient
	}
	if len(f.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(f.data), 3)
	if !f.failed {
		n = min(n, f.failAt)
		f.failAt -= n
	}
	copy(p, f.data[:n])
	f.data = f.data[n:]
	return n, nil
}

func TestReadFrameResumesAfterReaderError(t *testing.T) {
	t.Parallel()
	in := "\r\n" + frame("MSH|^~\\&|resumed") + frame("second")
	for failAt := 0; failAt < len(in); failAt++ {
		fr := NewFrameReader(&flakyReader{data: []byte(in), failAt: failAt}, 100)
		var got []string
		transient := 0
		for {
			p, err := fr.ReadFrame()
			if errors.Is(err, errTransient) {
				transient++
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("failAt %d: %v", failAt, err)
			}
			got = append(got, string(p))
		}
		if transient != 1 || len(got) != 2 || got[0] != "MSH|^~\\&|resumed" || got[1] != "second" {
			t.Fatalf("failAt %d: frames %q after %d transient errors", failAt, got, transient)
		}
	}
}

func TestStartFrameThenReadFrame(t *testing.T) {
	t.Parallel()
	fr := NewFrameReader(strings.NewReader("\n\n"+frame("A")), 10)
	if err := fr.StartFrame(); err != nil {
		t.Fatal(err)
	}
	if err := fr.StartFrame(); err != nil { // already started: no-op
		t.Fatal(err)
	}
	p, err := fr.ReadFrame()
	if err != nil || string(p) != "A" {
		t.Fatalf("ReadFrame = %q, %v", p, err)
	}
	if err := fr.StartFrame(); err != io.EOF {
		t.Fatalf("StartFrame at the end = %v, want io.EOF", err)
	}
}

// writeCounter counts Write calls.
type writeCounter struct {
	bytes.Buffer
	calls int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.calls++
	return w.Buffer.Write(p)
}

func TestWriteFrame(t *testing.T) {
	t.Parallel()
	var w writeCounter
	payload := []byte("MSH|^~\\&|A\rPID|1\r")
	if err := WriteFrame(&w, payload); err != nil {
		t.Fatal(err)
	}
	if w.calls != 1 {
		t.Fatalf("%d Write calls, want 1", w.calls)
	}
	if got, want := w.String(), frame(string(payload)); got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	got, err := NewFrameReader(&w.Buffer, 100).ReadFrame()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read back %q, %v", got, err)
	}

	for _, bad := range []string{"A\x0bB", "A\x1cB"} {
		w.Reset()
		err := WriteFrame(&w, []byte(bad))
		if !errors.Is(err, ErrUnframeable) || w.Len() != 0 {
			t.Errorf("WriteFrame(%q) = %v, wrote %d bytes: want ErrUnframeable and nothing written", bad, err, w.Len())
		}
	}
}

// AwaitingCR tells a stream that stopped after a frame's end block, with only
// its CR missing, from one that stopped earlier in the frame.
func TestReadFrameAwaitingCR(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"\x0bMSH|^~\\&\x1c": true,
		"\x0bMSH|^~\\&":     false,
		"":                  false,
	} {
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte(in)); pw.CloseWithError(errTransient) }()
		fr := NewFrameReader(pr, 0)
		if _, err := fr.ReadFrame(); !errors.Is(err, errTransient) {
			t.Fatalf("%q: %v, want the reader's own error", in, err)
		}
		if got := fr.AwaitingCR(); got != want {
			t.Errorf("%q: AwaitingCR() = %v, want %v", in, got, want)
		}
	}
}
