module example.com/myserver

go 1.26.0

require github.com/mediaqual/mediaqual v0.0.0

require (
	github.com/google/go-cmp v0.7.0 // indirect
	golang.org/x/image v0.48.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

// Until github.com/mediaqual/mediaqual is published, a clone of it stands in: this path is
// this repository's root; in your module, the path of your clone.
replace github.com/mediaqual/mediaqual => ../../../..
