// Command fsyncstall measures how the machine's disk treats a small durable
// append (a WAL commit: 4 KiB written, then fsync) while another file
// gets random page writes and an fsync on a schedule (a checkpoint: a
// database's pages copied from its log). It prints the append's latency
// percentiles and the slowest background flush.
//
// Both stores do this: SQLite's checkpoints (storage/sqlite/checkpoint.go)
// and PostgreSQL's checkpointer write pages all over the database file while
// commits append to the log. A disk that stalls small fsyncs behind a flush
// of scattered pages shows in mf's ACK latency as outliers that no change to
// mf removes; this program shows whether the disk does, without mf.
//
//	go run ./bench/fsyncstall [-dir DIR] [-duration 60s] [-pages 900] [-every 100ms]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"
)

const pageSize = 4096

func main() {
	dir := flag.String("dir", os.TempDir(), "directory for the two files (unlinked as soon as they are open: nothing is left behind)")
	duration := flag.Duration("duration", 60*time.Second, "how long to measure")
	pages := flag.Int("pages", 900, "random pages written per background flush (0: no background writes)")
	every := flag.Duration("every", 100*time.Millisecond, "how often the background writes and flushes")
	fileMiB := flag.Int("file-mib", 200, "size of the file the background writes into")
	sparse := flag.Bool("sparse", false, "leave the background's file unwritten (holes), so that its writes allocate blocks, as in a growing database")
	flag.Parse()
	if err := run(*dir, *duration, *pages, *every, *fileMiB, *sparse); err != nil {
		fmt.Fprintln(os.Stderr, "fsyncstall:", err)
		os.Exit(1)
	}
}

// report is what the program prints, as JSON.
type report struct {
	Pages          int     `json:"background_pages"`
	Sparse         bool    `json:"background_sparse"`
	EveryMS        float64 `json:"background_every_ms"`
	Appends        int     `json:"appends"`
	AppendsPerSec  float64 `json:"appends_per_second"`
	P50MS          float64 `json:"append_p50_ms"`
	P99MS          float64 `json:"append_p99_ms"`
	P999MS         float64 `json:"append_p999_ms"`
	MaxMS          float64 `json:"append_max_ms"`
	Flushes        int     `json:"background_flushes"`
	FlushMaxMS     float64 `json:"background_flush_max_ms"`
	FlushesOver100 int     `json:"background_flushes_over_100ms"`
}

func run(dir string, duration time.Duration, pages int, every time.Duration, fileMiB int, sparse bool) error {
	log, err := create(filepath.Join(dir, "fsyncstall.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	data, err := create(filepath.Join(dir, "fsyncstall.data"))
	if err != nil {
		return err
	}
	defer data.Close()
	// The data file is written in full first, so that the background writes
	// overwrite allocated blocks, as a checkpoint of a database that does
	// not grow does; with -sparse they fill holes instead.
	if sparse {
		err = data.Truncate(int64(fileMiB) << 20)
	} else {
		chunk := make([]byte, 1<<20)
		for range fileMiB {
			if _, err = data.Write(chunk); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if err := data.Sync(); err != nil {
		return err
	}

	stop := make(chan struct{})
	flushes := make(chan []time.Duration, 1)
	go func() { flushes <- background(data, pages, every, fileMiB, stop) }()

	page := make([]byte, pageSize)
	var lat []time.Duration
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		start := time.Now()
		if _, err := log.Write(page); err != nil {
			close(stop)
			return err
		}
		if err := log.Sync(); err != nil {
			close(stop)
			return err
		}
		lat = append(lat, time.Since(start))
	}
	close(stop)
	fl := <-flushes
	if len(lat) == 0 {
		return fmt.Errorf("no append finished in %v", duration)
	}

	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) float64 { return ms(lat[int(float64(len(lat)-1)*q)]) }
	r := report{Pages: pages, Sparse: sparse, EveryMS: ms(every), Appends: len(lat), AppendsPerSec: float64(len(lat)) / duration.Seconds(),
		P50MS: at(0.5), P99MS: at(0.99), P999MS: at(0.999), MaxMS: ms(lat[len(lat)-1]), Flushes: len(fl)}
	for _, d := range fl {
		r.FlushMaxMS = max(r.FlushMaxMS, ms(d))
		if d > 100*time.Millisecond {
			r.FlushesOver100++
		}
	}
	out, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// create makes a file and unlinks it at once: the open handle keeps it
// until it is closed, and nothing is left behind in dir.
func create(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return f, os.Remove(path)
}

// background writes pages random pages into data and fsyncs it, every
// every, until stop; it returns how long each round took.
func background(data *os.File, pages int, every time.Duration, fileMiB int, stop <-chan struct{}) []time.Duration {
	var took []time.Duration
	if pages == 0 {
		<-stop
		return took
	}
	page := make([]byte, pageSize)
	t := time.NewTicker(every)
	defer t.Stop()
	n := int64(fileMiB) << 20 / pageSize
	for {
		select {
		case <-stop:
			return took
		case <-t.C:
		}
		start := time.Now()
		for range pages {
			if _, err := data.WriteAt(page, rand.Int64N(n)*pageSize); err != nil {
				return took
			}
		}
		if err := data.Sync(); err != nil {
			return took
		}
		took = append(took, time.Since(start))
	}
}
