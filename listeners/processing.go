package listeners

import (
	"fmt"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/internal/textcut"
)

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
