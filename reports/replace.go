package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A run writes its report into a staging directory beside the report directory and then
// replaces the report directory with it whole, so that the report directory holds one run's
// report at every moment, never a mix of two.

// Replaceable refuses a report directory a run's report may not replace: one that holds
// files but no report (results.json), such as a home directory named by mistake.
func Replaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		return fmt.Errorf("MEDIAQUAL_REPORT_DIR=%s holds %s and no previous report (results.json): the run's report replaces the whole directory, so name an empty or new one", dir, entries[0].Name())
	}
	return nil
}

// ReplaceDir puts directory src where dst is and removes what dst held, each step a rename
// within one parent directory: dst is at every moment the old report whole, or the new one
// (or, between the two renames, absent), never a mix.
func ReplaceDir(dst, src string) error {
	if err := os.Chmod(src, 0o755); err != nil {
		return err
	}
	old := src + ".old"
	if err := os.Rename(dst, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		_ = os.Rename(old, dst)
		return err
	}
	return os.RemoveAll(old)
}

// Moved is rows as the report shows them once directory staging has become out: every path
// the rows recorded under staging (the AIPerf command's files, case files named in messages)
// names its place under out, where it will be, whether given relative or absolute. Done on the
// rows' JSON, so that no field is missed; rows are left as they were.
func Moved(rows []Row, staging, out string) ([]Row, error) {
	b, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	absStaging, err := filepath.Abs(staging)
	if err != nil {
		return nil, err
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	for _, p := range [][2]string{{absStaging, absOut}, {staging, out}} {
		from, _ := json.Marshal(p[0]) // a string always marshals
		to, _ := json.Marshal(p[1])
		// Inside the quotes: the JSON string forms of the two paths.
		b = bytes.ReplaceAll(b, from[1:len(from)-1], to[1:len(to)-1])
	}
	var shown []Row
	return shown, json.Unmarshal(b, &shown)
}
