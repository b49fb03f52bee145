package listeners

import (
	"fmt"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/internal/textcut"
)

// refusal is why an inbound refuses a message that parses: it is kept as
// rejected, never routed, and its sender is answered AR (CR in enhanced
// mode), since sent again it would be refused again.
type refusal struct {
	err    error         // what is wrong: stored with the message, and the ACK's reason
	cond   hl7.Condition // the ACK's ERR condition
	reason string        // the mf_messages_rejected_total reason
}

// refusalOf says why inbound in refuses msg, or has a nil err when it takes
// it: no control ID (MSH-10, which HL7 requires and the ACK names the
// message by), or a processing ID (MSH-11) the inbound does not take.
func refusalOf(in config.Inbound, msg *hl7.Message) refusal {
	if err := hl7.CheckControlID(msg); err != nil {
		return refusal{err: err, cond: hl7.ConditionOf(err), reason: reasonNoControlID}
	}
	if err := processingIDError(in, msg); err != nil {
		return refusal{err: err, cond: hl7.CondUnsupportedProcessingID, reason: reasonProcessingID}
	}
	return refusal{}
}

// processingIDError says why inbound in does not take msg: its processing
// ID (MSH-11.1) is not the inbound's processing_id. nil when it is, or when
// the inbound takes any.
func processingIDError(in config.Inbound, msg *hl7.Message) error {
	if in.ProcessingID == "" {
		return nil
	}
	got := msg.ProcessingID()
	if got == in.ProcessingID {
		return nil
	}
	if got == "" {
		return fmt.Errorf("hl7: no processing ID (MSH-11); inbound %s takes processing_id %s only", in.Name, in.ProcessingID)
	}
	return fmt.Errorf("hl7: processing ID (MSH-11) %q; inbound %s takes processing_id %s only", textcut.Cut(got, 20), in.Name, in.ProcessingID)
}
