package reports

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mediaqual/mediaqual/models/spec"
)

// Merge combines the reports of shards (runs of parts of the suite) into one: every shard's
// rows, sorted by checkpoint; the inventory, which every shard must have the same; the
// latest generation time; and a command naming each shard's. A checkpoint found in two
// shards is an error naming it unless both rows are identical (then it appears once).
func Merge(parts ...Report) (Report, error) {
	if len(parts) == 0 {
		return Report{}, errors.New("merge: no reports")
	}
	inv, err := json.Marshal(parts[0].Inventory)
	if err != nil {
		return Report{}, err
	}
	out := Report{Inventory: parts[0].Inventory}
	type seen struct {
		shard int
		row   []byte
	}
	where := map[string]seen{}
	commands := make([]string, len(parts))
	for i, p := range parts {
		if pi, err := json.Marshal(p.Inventory); err != nil {
			return Report{}, err
		} else if !bytes.Equal(pi, inv) {
			return Report{}, fmt.Errorf("merge: shard %d's inventory differs from shard 1's%s", i+1, inventoryDiff(parts[0].Inventory, p.Inventory))
		}
		if p.Generated.After(out.Generated) {
			out.Generated = p.Generated
		}
		commands[i] = p.Command
		for _, row := range p.Rows {
			b, err := json.Marshal(row)
			if err != nil {
				return Report{}, err
			}
			if s, ok := where[row.Checkpoint]; ok {
				if bytes.Equal(s.row, b) {
					continue
				}
				return Report{}, fmt.Errorf("merge: checkpoint %s is in shard %d and shard %d with different results", row.Checkpoint, s.shard, i+1)
			}
			where[row.Checkpoint] = seen{i + 1, b}
			out.Rows = append(out.Rows, row)
		}
	}
	SortRows(out.Rows)
	shards := "shards"
	if len(parts) == 1 {
		shards = "shard"
	}
	out.Command = fmt.Sprintf("merged from %d %s: %s", len(parts), shards, strings.Join(commands, "; "))
	return out, nil
}

// inventoryDiff names the first checkpoint on which two inventories differ.
func inventoryDiff(a, b []spec.Entry) string {
	ids := func(inv []spec.Entry) map[string][]byte {
		m := map[string][]byte{}
		for _, e := range inv {
			m[e.ID], _ = json.Marshal(e)
		}
		return m
	}
	ma, mb := ids(a), ids(b)
	var names []string
	for id, ea := range ma {
		if eb, ok := mb[id]; !ok || !bytes.Equal(ea, eb) {
			names = append(names, id)
		}
	}
	for id := range mb {
		if _, ok := ma[id]; !ok {
			names = append(names, id)
		}
	}
	sort.Strings(names)
	switch {
	case len(names) == 0:
		return " (same entries in another order)"
	case len(names) > 3:
		return fmt.Sprintf(" (at %s and %d more)", strings.Join(names[:3], ", "), len(names)-3)
	}
	return " (at " + strings.Join(names, ", ") + ")"
}

// ReadReport reads a results.json.
func ReadReport(file string) (Report, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("%s: %w", file, err)
	}
	return r, nil
}

// MergeFiles merges shards' results.json files (Merge) into dir: results.json, results.md
// and index.html. Each shard's pictures are copied from beside its results.json into dir at
// the same relative path, or under shard-<n>/ when another shard already put a different
// file there. It returns the paths WriteFiles wrote.
func MergeFiles(dir string, results ...string) ([]string, error) {
	if len(results) == 0 {
		return nil, errors.New("merge: no results.json given")
	}
	parts := make([]Report, len(results))
	claimed := map[string][32]byte{} // destination path -> content digest
	for i, file := range results {
		r, err := ReadReport(file)
		if err != nil {
			return nil, err
		}
		src := filepath.Dir(file)
		for ri := range r.Rows {
			pics := append([]Picture(nil), r.Rows[ri].Pictures...)
			for pi, p := range pics {
				dst, err := placePicture(dir, src, i+1, p.Path, claimed)
				if err != nil {
					return nil, fmt.Errorf("shard %d (%s), %s: %w", i+1, file, r.Rows[ri].Checkpoint, err)
				}
				pics[pi].Path = dst
			}
			r.Rows[ri].Pictures = pics
		}
		parts[i] = r
	}
	m, err := Merge(parts...)
	if err != nil {
		return nil, err
	}
	return WriteFiles(dir, m)
}

// placePicture copies shard's picture rel (relative to src) into dir and returns its new
// relative path.
func placePicture(dir, src string, shard int, rel string, claimed map[string][32]byte) (string, error) {
	if !filepath.IsLocal(filepath.FromSlash(rel)) {
		return "", fmt.Errorf("picture path %q is not inside the shard's report directory", rel)
	}
	b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(rel)))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	dst := path.Clean(filepath.ToSlash(rel))
	if prev, ok := claimed[dst]; ok && prev != sum {
		dst = path.Join(fmt.Sprintf("shard-%d", shard), dst)
		if prev, ok := claimed[dst]; ok && prev != sum {
			return "", fmt.Errorf("picture %s collides even under its shard's directory", rel)
		}
	}
	claimed[dst] = sum
	return dst, copyFile(filepath.Join(src, filepath.FromSlash(rel)), filepath.Join(dir, filepath.FromSlash(dst)))
}

// copyFile puts from's bytes at to, creating its directory, unless the two are one file (a
// report merged, or written, into the directory its pictures are in).
func copyFile(from, to string) error {
	if fi, err := os.Stat(to); err == nil {
		if si, err := os.Stat(from); err == nil && os.SameFile(fi, si) {
			return nil
		}
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return writeFileAtomic(to, b)
}

func writeFileAtomic(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".picture-*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, bytes.NewReader(b)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), name)
}
