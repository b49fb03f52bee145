package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/urfave/cli/v2"
)

func retryCommand() *cli.Command {
	return queueCommand("retry",
		"retry a pending queue row, a blocked lane's head say: due now, with a fresh set of attempts (POST /queue/{id}/retry)",
		"queue row %d retried: it is due now, with a fresh set of attempts, and its lane sends it in its turn (once no row is ahead of it, and while its outbound is not held)")
}

func skipCommand() *cli.Command {
	return queueCommand("skip",
		"skip a lane's pending head, a blocked one say: set aside as dead, its lane moves on (POST /queue/{id}/skip)",
		"queue row %d skipped: it is set aside as dead (its message is kept), and its lane moves on to the row behind it, if any")
}

// queueCommand is mf ACTION QUEUE_ID: POST /queue/{id}/ACTION, an operator's
// action on one queue row, which says what became of the row in done (a
// format of the row's id).
func queueCommand(action, usage, done string) *cli.Command {
	return &cli.Command{
		Name:      action,
		Usage:     usage,
		ArgsUsage: "QUEUE_ID",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			arg, err := idArg(c, argument{What: "queue id", Value: "the queue id", Needs: "the id of a queue row (mf lanes shows a lane's head as HEAD)",
				Usage: "QUEUE_ID", One: "retry or skip one row at a time"}, "mf lanes shows a lane's head as HEAD")
			if err != nil {
				return err
			}
			id, _ := strconv.ParseInt(arg, 10, 64) // idArg checked it
			body, _, err := callAPI(c, http.MethodPost, "/queue/"+strconv.FormatInt(id, 10)+"/"+action, "operator")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			var a struct {
				ID     int64  `json:"id"`
				Action string `json:"action"`
			}
			if err := json.Unmarshal(body, &a); err != nil || a.ID != id || a.Action != action {
				return fmt.Errorf("mf %s: the API's answer is not a %s of queue row %d: %.200s", action, action, id, body)
			}
			fmt.Fprintf(c.App.Writer, done+"\n", a.ID)
			return nil
		},
	}
}
