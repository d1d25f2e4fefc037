module example.com/goodmod

go 1.26
