// Package cli is the mf command (urfave/cli/v2). It only turns flags and
// files into a config.Config and starts things; no engine logic lives here.
package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
)

// Version is set at build time with -ldflags "-X github.com/messagefoundry/mf/cli.Version=…".
var Version = "dev"

// Main runs the mf command with args and returns the process exit code.
func Main(args []string) int {
	if err := App(os.Stdout, os.Stderr).Run(args); err != nil {
		fmt.Fprintln(os.Stderr, "mf:", err)
		return 1
	}
	return 0
}

// App builds the command tree writing to stdout and stderr.
func App(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "mf",
		Usage:     "MessageFoundry: an HL7 v2 integration engine",
		Version:   Version,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     logFlags(true),
		Commands: []*cli.Command{
			runCommand(),
			checkCommand(),
			migrateCommand(),
			backupCommand(),
			restoreCommand(),
			reloadCommand(),
			sendCommand(),
			benchCommand(),
			statusCommand(),
			nodesCommand(),
			lanesCommand(),
			messagesCommand(),
			messageCommand(),
			resendCommand(),
			holdCommand(),
			releaseCommand(),
			resendDeadCommand(),
			retryCommand(),
			skipCommand(),
			tokenCommand(),
			versionCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {}, // Main prints the error once
	}
	app.Action = unknownCommand("", func() []*cli.Command { return app.Commands }, cli.ShowAppHelp)
	app.OnUsageError = usageErrorOnly("mf")
	usageErrorsOnly("mf", app.Commands)
	return app
}

// usageErrorOnly answers a usage error of command path (an unknown flag,
// a bad flag value) with the error alone, which Main prints on stderr:
// urfave/cli's own answer printed "Incorrect Usage" and the whole help on
// stdout, which a script reading mf status --json or mf token new took for
// its output.
func usageErrorOnly(path string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return fmt.Errorf("%w (%s --help lists the flags)", err, path)
	}
}

func usageErrorsOnly(path string, cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = usageErrorOnly(path + " " + c.Name)
		usageErrorsOnly(path+" "+c.Name, c.Subcommands)
	}
}

// unknownCommand is the action of a command whose work is in its
// subcommands (mf itself, mf token): without an argument it shows its
// help; an argument is a command it does not have, named with those it has.
// urfave/cli's own answer, "No help topic for 'stauts'", read as a question
// about help.
// name is the command's name after mf ("" for mf itself).
func unknownCommand(name string, commands func() []*cli.Command, help func(*cli.Context) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return help(c)
		}
		var names []string
		for _, cmd := range commands() {
			if !cmd.Hidden && cmd.Name != "help" {
				names = append(names, cmd.Name)
			}
		}
		prefix, full := "", "mf"
		if name != "" {
			prefix, full = name+": ", "mf "+name
		}
		return fmt.Errorf("%sunknown command %q: the commands are %s (%s --help describes them)",
			prefix, c.Args().First(), strings.Join(names, ", "), full)
	}
}

// configFlag is the --config flag of the commands that read one, new for
// each: urfave/cli keeps what a run set (from MF_CONFIG, say) in the flag
// itself, and one flag shared by the apps of one process (a test's) gave
// the next run the last one's file as its default.
func configFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "config", Aliases: []string{"c"}, EnvVars: []string{"MF_CONFIG"},
		Usage: "config file (default: ./mf.toml if present, else the built-in default)",
	}
}

// logFlags are accepted before the command (mf --log-level debug run) and
// after it (mf run --log-level debug); urfave/cli parses each level apart.
// Only the global ones read the environment: a command's own copy that did
// read it counted as set by it, and being the innermost, beat a flag given
// before the command (MF_LOG_FORMAT=console mf --log-format json run logged
// console).
func logFlags(env bool) []cli.Flag {
	var format, level []string
	if env {
		format, level = []string{"MF_LOG_FORMAT"}, []string{"MF_LOG_LEVEL"}
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "json", Usage: "log format: json or console", EnvVars: format},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: level},
	}
}

// setFlag returns the value of a flag defined at several levels: the
// innermost level that set it wins, else the default.
func setFlag(c *cli.Context, name string) string {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx.String(name)
		}
	}
	return c.String(name)
}

// logger builds the process logger from the log flags.
func logger(c *cli.Context) (zerolog.Logger, error) {
	levelName, format := setFlag(c, "log-level"), setFlag(c, "log-format")
	// Only the four levels mf logs at: zerolog also parses trace, fatal,
	// panic and disabled, the last three of which drop the ERROR lines.
	level, err := zerolog.ParseLevel(strings.ToLower(levelName))
	if err != nil || level < zerolog.DebugLevel || level > zerolog.ErrorLevel {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: want debug, info, warn or error", levelName)
	}
	var w io.Writer = c.App.ErrWriter
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: c.App.ErrWriter, TimeFormat: time.RFC3339}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want json or console", format)
	}
	setTimeFormat.Do(func() { zerolog.TimeFieldFormat = time.RFC3339Nano })
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// setTimeFormat sets zerolog's time format, a global, once: set at every
// command's start, it raced with the lines an engine still running in the
// same process (a test's) was timestamping.
var setTimeFormat sync.Once

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(c.App.Writer, "mf", Version)
			return nil
		},
	}
}
