module memra.dev/memra

go 1.19
