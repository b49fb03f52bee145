// Package hl7 is mf's HL7 v2 toolkit: the MLLP frame codec, field access on
// a parsed message, and the acknowledgment (ACK/NAK) builder and reader. It
// has no dependencies outside the standard library.
//
// # MLLP
//
// A frame is 0x0B, the payload, 0x1C 0x0D. FrameReader reads one frame at a
// time from a stream, with a bound on the payload: a frame that crosses it
// fails with ErrFrameTooLarge as soon as it does, without the rest being
// read into memory. CR and LF between frames are skipped; any other byte
// where a frame should start is an error wrapping ErrNotFramed. Both errors
// leave the stream out of step: the listener answers with a NAK and closes
// the connection. WriteFrame writes one frame in a single Write.
//
// # Messages and field paths
//
// Parse reads the segments (CR-separated; LF and CRLF are accepted) and the
// separators from MSH-1 and MSH-2, and keeps the bytes untouched: mf stores
// and forwards exactly what it received. Fields are located on demand with a
// Path, written SEG-F, SEG-F.C or SEG-F.C.S, with an optional segment
// occurrence SEG[2]-F and field repetition SEG-F[2]. ParsePath validates a
// path when the configuration is loaded (route filters, lane_key), so that a
// bad path is refused at load, not ignored at run time.
//
// MSH is numbered as the standard numbers it: MSH-1 is the field separator
// itself, MSH-2 the encoding characters, MSH-3 the sending application, and
// MSH-9 the message type, MSH-10 the control ID. Parse does not require
// MSH-10; CheckControlID does, as an inbound must (the ACK names the
// message by it).
//
// Values are returned raw: escape sequences such as \F\ or \S\ are not
// decoded, so a value compares equal to what the sender wrote, and a value
// copied into another message with the same separators stays correct.
// Unescape decodes a value for display.
//
// # Acknowledgments
//
// Ack builds the answer to a parsed message (DESIGN §6): AA/AE/AR in the
// original mode, CA/CE/CR (commit acknowledgments) in the enhanced mode that
// a valued MSH-15 asks for; AcceptCode picks the code for an Outcome and
// ShouldAck applies MSH-15's conditions (AL, NE, ER, SU). NakUnparsable
// answers input that has no usable MSH; AckUnparsable answers a payload
// Parse refused, with its control ID when MSH-1 alone finds it; a payload
// refused for a second MSH (ErrSecondMSH) has a whole first header, which
// ParseHeader reads for Ack. An ACK carries only MSH fields and
// the control ID of the message it answers, never its content; the reason
// text is escaped and goes in MSA-3 and an ERR segment laid out for the
// message's version (see Ack). ParseAck reads the answer of a receiver for
// the MLLP sender.
//
// Batches (FHS/BHS) are not supported: a payload must start with MSH.
package hl7
