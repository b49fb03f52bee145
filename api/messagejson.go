package api

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"unicode/utf8"
)

// messageAnswer is GET /messages/{id}'s answer, a Message, written piece by
// piece (writeTo) rather than by json.Marshal: the payload may be as large as
// max_message_bytes (512 MiB at most), and Marshal built the whole answer in
// a buffer it grew by doubling and then copied, with each byte that is not
// UTF-8 escaped as \ufffd (6 bytes): 8 MiB of Latin-1 0xE9 gave a 61 MB
// answer and about 500 MiB allocated. The shape is Message's, field for
// field (TestAMessageAnswerIsAMessage).
type messageAnswer struct {
	head    MessageHead
	payload []byte
	queue   []QueueRow
}

// writeTo writes the answer and a newline to w, as json.Marshal writes a
// Message but for each byte of the payload that is not UTF-8, which is
// U+FFFD as it is (3 bytes) rather than escaped (6): the same text to a
// reader of JSON.
func (a messageAnswer) writeTo(w io.Writer) error {
	head, err := json.Marshal(a.head)
	if err != nil {
		return err
	}
	queue, err := json.Marshal(a.queue)
	if err != nil {
		return err
	}
	b := bufio.NewWriterSize(w, 64<<10)
	b.Write(head[:len(head)-1]) // its fields, without the closing brace
	b.WriteString(`,"payload":`)
	if err := writeJSONText(b, a.payload); err != nil {
		return err
	}
	b.WriteString(`,"payload_base64":`)
	if utf8.Valid(a.payload) {
		b.WriteString("null")
	} else {
		b.WriteByte('"')
		enc := base64.NewEncoder(base64.StdEncoding, b)
		enc.Write(a.payload)
		if err := enc.Close(); err != nil {
			return err
		}
		b.WriteByte('"')
	}
	b.WriteString(`,"queue":`)
	b.Write(queue)
	b.WriteString("}\n")
	return b.Flush()
}

// byteCount is an io.Writer that counts what it is given: the length of an
// answer before it is written.
type byteCount int64

func (c *byteCount) Write(p []byte) (int, error) {
	*c += byteCount(len(p))
	return len(p), nil
}

const hexDigits = "0123456789abcdef"

// writeJSONText writes p as a JSON string as encoding/json writes a Go
// string (<, > and & escaped, U+2028 and U+2029 too), but for each byte that
// is not UTF-8, which is U+FFFD itself, not \ufffd. It stops at the first
// failed write (bufio keeps the error).
func writeJSONText(w *bufio.Writer, p []byte) error {
	w.WriteByte('"')
	start := 0
	for i := 0; i < len(p); {
		if b := p[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			if _, err := w.Write(p[start:i]); err != nil {
				return err
			}
			switch b {
			case '\\', '"':
				w.WriteByte('\\')
				w.WriteByte(b)
			case '\b':
				w.WriteString(`\b`)
			case '\f':
				w.WriteString(`\f`)
			case '\n':
				w.WriteString(`\n`)
			case '\r':
				w.WriteString(`\r`)
			case '\t':
				w.WriteString(`\t`)
			default:
				w.WriteString(`\u00`)
				w.WriteByte(hexDigits[b>>4])
				w.WriteByte(hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			if _, err := w.Write(p[start:i]); err != nil {
				return err
			}
			w.WriteString("\uFFFD")
			i++
			start = i
			continue
		}
		// Valid in JSON, but not in JavaScript (JSONP): encoding/json
		// escapes them.
		if r == '\u2028' || r == '\u2029' {
			if _, err := w.Write(p[start:i]); err != nil {
				return err
			}
			w.WriteString(`\u202`)
			w.WriteByte(hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	if _, err := w.Write(p[start:]); err != nil {
		return err
	}
	return w.WriteByte('"')
}
