// Command mf is MessageFoundry, an HL7 v2 integration engine. See README.md.
package main

import (
	"os"

	"github.com/messagefoundry/mf/cli"
)

func main() { os.Exit(cli.Main(os.Args)) }
