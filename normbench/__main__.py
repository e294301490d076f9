from normbench.cli import main

if __name__ == "__main__":  # guarded: sweep workers re-import the main module when spawned
    main()
