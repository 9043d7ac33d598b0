module mediaqual

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/image v0.48.0 // indirect
)
