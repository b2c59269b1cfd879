"""What each chapter's page says: findings, computed notes and display tables, built from a
chapter's result file. One module per chapter, named like the measurement module it reads
(``pages.storage`` renders what ``datajourney.storage`` measured); the measurement modules
themselves never write prose."""
