from datajourney.book.scaffold import main

raise SystemExit(main())
